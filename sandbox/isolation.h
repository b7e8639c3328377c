// What a policy asks of the kernel, turned into the runtime's options in one place for `moat run`
// and the agent alike: the mount options (credentials, homes, host sockets hidden; and moat's own
// records, which the sandbox must never read: the egress state and audit log, the agent's state)
// and the egress options (none when no domain is allowed: the sandbox keeps only its loopback and
// no proxy runs).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/egress/sandbox_egress.h"
#include "sandbox/host_view.h"
#include "sandbox/mounts.h"
#include "sandbox/policy/policy.h"

namespace moat::sandbox {

struct IsolationInputs {
  HostContext host;
  // --workspace: a host directory shown at /workspace instead of a private tmpfs.
  std::optional<std::string> workspace;
  // --cwd: where the command starts, shown at its own path.
  std::optional<std::string> working_dir;
  // Where the egress proxy appends its audit records (hidden from the sandbox); unset means the
  // default, inside egress::kStateDir.
  std::optional<std::string> audit_log;
  // More host paths only the caller may see (the agent's state directory).
  std::vector<std::string> private_paths;
};

struct Isolation {
  MountOptions mounts;
  std::optional<egress::EgressOptions> egress;
};

absl::StatusOr<Isolation> IsolationFor(const Policy& policy, const IsolationInputs& inputs);

// The policy's network settings as the egress proxy's options (sandbox_id and observer are the
// caller's to set).
egress::EgressOptions EgressOptionsFor(const Policy& policy, const std::string& audit_log);

}  // namespace moat::sandbox
