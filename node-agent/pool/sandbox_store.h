// What the agent keeps on disk about each sandbox it hands out, so that a restarted agent can
// re-adopt it (docs/agent.md): `<dir>/<id>.json`, mode 0600 in a root-only state dir, written
// atomically (a temporary file renamed over the old one). The backend keeps its own record of
// the kernel side (kernel_backend.h); this one is the registry's side: profile, expiry, env,
// metadata, limits and the sandbox's token.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "node-agent/pool/registry.h"

namespace moat::agent {

class SandboxStore {
 public:
  // `dir` is created (0700) if missing.
  static absl::StatusOr<SandboxStore> Open(std::string dir);

  absl::Status Save(const SandboxRecord& record) const;
  // NotFound if there is none; DataLoss if it cannot be read back.
  absl::StatusOr<SandboxRecord> Load(absl::string_view id) const;
  void Remove(absl::string_view id) const;
  std::vector<std::string> Ids() const;  // of every record, sorted
  const std::string& dir() const { return dir_; }

 private:
  explicit SandboxStore(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(absl::string_view id) const;

  std::string dir_;
};

}  // namespace moat::agent
