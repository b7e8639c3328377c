// Starts and stops the moat-probe process of each sandbox (node-agent/probe/, docs/probe.md).
//
// The probe is started with posix_spawn (a vfork-style clone: safe and cheap from the agent's
// many threads) in the agent's own pid namespace, so nothing in the sandbox can see, signal or
// trace it. It inherits exactly three descriptors: init's pidfd (3), the write end of its report
// pipe (4) and the sandbox's seccomp listener (5), whose notifications it answers. The read end
// of the pipe goes to the ProbeMonitor, which declares the sandbox compromised when heartbeats
// stop.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node-agent/probe/probe_monitor.h"
#include "sandbox/live_sandbox.h"

namespace moat::agent {

class ProbeLauncher {
 public:
  // `probe_binary`: the moat-probe executable. `monitor` must outlive the launcher.
  ProbeLauncher(std::string probe_binary, absl::Duration interval, ProbeMonitor* monitor)
      : binary_(std::move(probe_binary)), interval_(interval), monitor_(monitor) {}
  ~ProbeLauncher();  // Stops every probe still running.

  // Starts the probe of sandbox `id` and hands its pipe to the monitor. Takes the sandbox's
  // seccomp listener. Errors name what failed (the sandbox must then not be used: nobody would
  // answer its seccomp notifications... the kernel would fail them with ENOSYS, but nobody
  // would watch it either).
  absl::Status Start(const std::string& id, sandbox::LiveSandbox& box,
                     const sandbox::Limits& limits);
  // Stops watching, kills the probe and reaps it. Idempotent.
  void Stop(const std::string& id);
  // Stops watching every probe but leaves them running, for the next agent (which takes the
  // seccomp listener from a probe, fd 5, and then kills it: KernelBackend::Adopt).
  void ReleaseAll();

  // The probe's pid (tests stop it with SIGSTOP); -1 if none.
  pid_t ProbePid(const std::string& id) const;

  // The moat-probe next to the running executable (/proc/self/exe's directory).
  static std::string DefaultBinary();

 private:
  const std::string binary_;
  const absl::Duration interval_;
  ProbeMonitor* const monitor_;
  mutable absl::Mutex mu_;
  std::map<std::string, pid_t> probes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::agent
