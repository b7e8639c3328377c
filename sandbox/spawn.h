// Parent side of starting a sandbox: clone3 into new namespaces, then the handshake of contain.h.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/contain.h"
#include "util/child_failure.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

// A running sandbox, as seen by its supervisor.
struct SandboxProcess {
  pid_t pid = -1;  // the sandbox's init, in the supervisor's pid namespace
  UniqueFd pidfd;  // readable when init has exited
  UniqueFd sync;   // init sends the command's wait status here
  UniqueFd stdout_read;
  UniqueFd stderr_read;
  UniqueFd stdin_write;                   // set when stdin is piped
  UniqueFd seccomp_listener;              // set when the filter notifies violations
  std::optional<std::string> exec_error;  // the command itself could not be executed
  absl::Time started;
  // When each setup phase ended, for MOAT_TRACE and the benchmarks.
  std::vector<std::pair<const char*, absl::Time>> timeline;
};

struct SpawnOptions {
  bool pipe_stdin = false;  // else the command's stdin is /dev/null
  // Called once the sandbox is in its cgroup and before its command may start, e.g. to bind the
  // egress listeners in its network namespace. An error aborts the start.
  std::function<absl::Status(int pidfd)> before_start;
  // Given the plan's `sockets` (contain.h), in its order, once init has made them and before
  // before_start; required when the plan has any. An error aborts the start.
  std::function<absl::Status(std::vector<UniqueFd> sockets)> take_sockets;
  // The sandbox's cgroup, with its limits. Either made before (needed for cgroup v2's
  // clone3(CLONE_INTO_CGROUP)), or made by `make_cgroup` after clone3 while the child builds its
  // mounts (cgroup v1: creating and moving into it then overlap the child's work). One is required.
  Cgroup* cgroup = nullptr;
  std::function<absl::StatusOr<Cgroup*>()> make_cgroup;
  // A network namespace made ahead (netns_prep.h) for the child to be born in; -1: clone3 makes
  // a new one. With one, the plan's `loopback_ready` should be set (its lo is up already).
  int netns_fd = -1;
  absl::Duration setup_timeout = absl::Seconds(10);
};

// Starts the sandbox and returns once the command has been exec'd (or failed to exec). Any
// setup failure kills what was started and returns an error naming the step; nothing runs
// unsandboxed. `plan` is completed with the descriptors and must outlive the call.
absl::StatusOr<SandboxProcess> SpawnSandbox(ContainPlan& plan, const SpawnOptions& options);

// Kills a started sandbox (its init, and with it everything in its pid namespace) and reaps it.
void KillSandbox(SandboxProcess& proc);

// The error for a step the child reported: the step, its detail, the errno, and advice chosen by
// what the step needs (child_failure.h's StepNeeds) or else by the errno.
absl::Status ChildFailureStatus(const ChildFailure& failure);

}  // namespace moat::sandbox
