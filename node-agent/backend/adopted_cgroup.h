// The cgroup of a sandbox a previous agent made and this one re-adopted (kernel_backend.h): its
// directories exist, with the sandbox's processes in them. Reads usage and kills and removes
// what is there, in any layout (v2, v1, hybrid), from the files alone; it never adds processes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/cgroup/cgroup.h"

namespace moat::agent {

class AdoptedCgroup final : public sandbox::Cgroup {
 public:
  // `paths`: the cgroup's directories, one per hierarchy (each must exist).
  static absl::StatusOr<std::unique_ptr<AdoptedCgroup>> Open(std::vector<std::string> paths);
  ~AdoptedCgroup() override;  // Destroy(), if not done

  absl::Status AddProcess(pid_t pid) override;  // Unimplemented: adopted sandboxes only shrink
  int clone_into_fd() const override { return -1; }
  absl::StatusOr<uint64_t> ReadCpuNs() override;
  absl::StatusOr<sandbox::CgroupUsage> ReadUsage() override;
  absl::Status KillAll() override;
  absl::Status Destroy() override;
  absl::Status Recycle() override { return Destroy(); }
  std::vector<std::string> paths() const override { return paths_; }

 private:
  explicit AdoptedCgroup(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  // The first of paths_ that has `file`, or "".
  std::string Find(const std::string& file) const;

  std::vector<std::string> paths_;
  bool destroyed_ = false;
};

}  // namespace moat::agent
