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
// bounded number of open files.
std::vector<RlimitSetting> PlanRlimits(absl::Duration cpu_timeout);

// Child side, async-signal-safe.
bool ApplyRlimits(const std::vector<RlimitSetting>& settings, int error_fd);

}  // namespace moat::sandbox
