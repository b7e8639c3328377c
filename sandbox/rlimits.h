// Resource limits set with setrlimit: per process backstops beside the cgroup limits.
#pragma once

#include <sys/resource.h>

#include <vector>

#include "absl/time/time.h"

namespace moat::sandbox {

struct RlimitSetting {
  int resource;
  struct rlimit limit;
  const char* name;  // for error reports
};

// Parent side: no core dumps; RLIMIT_CPU a little above the CPU-time limit (the cgroup reading
// is what enforces it; this catches a single runaway process even if the supervisor stalls); a
// bounded number of open files. Each is capped at this process's hard limit, which the sandbox
// inherits and cannot raise without CAP_SYS_RESOURCE: a limit tighter than planned still bounds
// the sandbox, while a refused raise would fail every run (a container runtime's hard
// RLIMIT_NOFILE of 1024, for one).
std::vector<RlimitSetting> PlanRlimits(absl::Duration cpu_timeout);

// `wanted` with both values at most `hard` (RLIM_INFINITY: unchanged). Pure.
struct rlimit CapAtHardLimit(struct rlimit wanted, rlim_t hard);

// Child side, async-signal-safe.
bool ApplyRlimits(const std::vector<RlimitSetting>& settings, int error_fd);

}  // namespace moat::sandbox
