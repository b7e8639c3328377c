// The one preparation of a sandbox, for `moat run` (Runner::Run) and the agent's long-lived
// sandboxes (SandboxFactory::Start) alike: everything the child needs, made in the parent before
// clone3 (contain.h): the egress session and its resolv.conf overlay, the mount plan with the
// sandbox's host ids, and the contain plan (ids, mounts, rlimits, capabilities, the seccomp
// program, and the command with its environment). What differs between the two callers (the
// cgroup's timing, the reaper, the creation guard) stays with them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sandbox/contain.h"
#include "sandbox/egress/sandbox_egress.h"
#include "sandbox/host_setup.h"
#include "sandbox/mounts.h"
#include "sandbox/policy/policy.h"
#include "sandbox/seccomp/seccomp_filter.h"

namespace moat::sandbox {

struct PrepareInputs {
  const MountOptions* mounts = nullptr;               // required
  absl::Duration cpu_timeout = absl::ZeroDuration();  // RLIMIT_CPU backstop; zero: none
  // Network through the egress proxy (sandbox_id set by the caller); none when unset.
  const egress::EgressOptions* egress = nullptr;
  const SeccompProgram* seccomp = nullptr;  // required (HostSetup::Seccomp)
  // The command (empty for an agent sandbox, whose init waits for commands) and its variables,
  // on top of DefaultSandboxEnv() and the proxy's. Views of the caller's: copied once, into the
  // plan.
  absl::Span<const std::string> argv;
  absl::Span<const std::pair<std::string, std::string>> env;
};

// Held by pointer: plan.mounts points at mounts.
struct PreparedSandbox {
  MountPlan mounts;
  ContainPlan plan;  // not yet finalised: the caller adds what is its own, then Finalize()
  std::unique_ptr<egress::EgressSession> egress;
  // The sandbox's environment: the defaults, the proxy's, then the inputs'.
  std::vector<std::pair<std::string, std::string>> env;

  explicit PreparedSandbox(MountPlan m) : mounts(std::move(m)) {}
};

// Fails, with nothing left behind, if any step cannot be prepared (fail closed: nothing runs).
absl::StatusOr<std::unique_ptr<PreparedSandbox>> PrepareSandbox(const HostSetup& host,
                                                                const PrepareInputs& inputs);

// The environment every command starts with, before the policy's and the request's variables.
std::vector<std::pair<std::string, std::string>> DefaultSandboxEnv();

}  // namespace moat::sandbox
