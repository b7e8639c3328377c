// What moat-probe watches and the limits it checks, parsed from its command line. The agent's
// backend starts the probe; docs/probe.md lists the flags.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sandbox/seccomp/seccomp_filter.h"

namespace moat::agent::probe {

struct ProbeConfig {
  // The sandbox's init: an inherited pidfd (preferred: no pid reuse race) or a pid.
  int pidfd_fd = -1;
  pid_t pid = 0;
  int report_fd = -1;  // write end of the pipe to the agent
  // The seccomp user-notification listener, and the arch its program was built for.
  int seccomp_fd = -1;
  sandbox::Arch arch = sandbox::NativeArch();
  // The sandbox's cgroup: one directory per v1 hierarchy, or its one cgroup2 directory.
  std::vector<std::string> cgroup_dirs;
  absl::Duration interval = absl::Seconds(5);
  uint64_t memory_max = 0;  // bytes; 0: not checked
  uint64_t pids_max = 0;    // 0: not checked
  std::optional<double> cpu_seconds_max;
  std::string sandbox_id;
  // Take the init's mount table at start as the only one allowed (the backend starts the probe
  // once the sandbox's mounts are final). Without it the mount table is not watched.
  bool expected_mounts_from_start = false;
};

// Parses argv (argv[0] is the program). Errors name the flag and what is expected.
absl::StatusOr<ProbeConfig> ParseProbeFlags(int argc, const char* const* argv);

inline constexpr char kProbeUsage[] =
    "usage: moat-probe (--pidfd-fd=N | --pid=P) --report-fd=N --sandbox-id=ID\n"
    "                  [--cgroup-dir=DIR]... [--interval=5s] [--memory-max=BYTES]\n"
    "                  [--pids-max=N] [--cpu-seconds-max=S] [--seccomp-fd=N\n"
    "                  [--arch=x86_64|aarch64]] [--expected-mounts-from-start]\n";

}  // namespace moat::agent::probe
