// Watches a running sandbox from outside: relays or collects its output, answers seccomp
// notifications, enforces the wall-clock and CPU-time limits, and assembles the result.
#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/creation_guard.h"
#include "sandbox/output/result.h"
#include "sandbox/output/sanitizer.h"
#include "sandbox/seccomp/seccomp_filter.h"
#include "sandbox/spawn.h"

namespace moat::sandbox {

struct SuperviseOptions {
  absl::Duration wall_timeout = absl::Seconds(60);
  absl::Duration cpu_timeout = absl::Seconds(30);
  double cpus = 1.0;  // the CPU quota: bounds how fast CPU time can grow between two readings

  // Capture: keep each stream (bounded) and return it cleaned. Live: write it to the given
  // descriptors as it arrives, through a terminal filter when `filter_live` is set.
  bool capture = true;
  SanitizeOptions sanitize;
  int live_stdout_fd = 1;
  int live_stderr_fd = 2;
  bool filter_live = false;

  int stdin_source_fd = -1;  // with SpawnOptions::pipe_stdin: copied into the command's stdin
  int cancel_fd = -1;        // readable (e.g. a signalfd) = stop the sandbox now
  Arch arch = NativeArch();
  size_t max_violations = 64;
  // Takes the notifications of calls that add a name (the program guards creation); the rest
  // are violations, answered and recorded here.
  CreationGuard* creation_guard = nullptr;
};

// Runs until the sandbox's init has exited and its output is drained. The caller still owns
// (and destroys) the cgroup.
absl::StatusOr<RunResult> Supervise(SandboxProcess& proc, Cgroup& cgroup,
                                    const SuperviseOptions& options);

}  // namespace moat::sandbox
