#include "sandbox/rlimits.h"

#include <algorithm>
#include <cerrno>

#include "util/child_failure.h"

namespace moat::sandbox {

std::vector<RlimitSetting> PlanRlimits(absl::Duration cpu_timeout) {
  rlim_t cpu_seconds =
      static_cast<rlim_t>(absl::ToInt64Seconds(absl::Ceil(cpu_timeout, absl::Seconds(1)))) + 2;
  std::vector<RlimitSetting> settings = {
      {RLIMIT_CORE, {0, 0}, "RLIMIT_CORE"},
      {RLIMIT_CPU, {cpu_seconds, cpu_seconds + 1}, "RLIMIT_CPU"},
      {RLIMIT_NOFILE, {4096, 4096}, "RLIMIT_NOFILE"},
  };
  for (RlimitSetting& s : settings) {
    struct rlimit inherited;
    if (::getrlimit(s.resource, &inherited) != 0) continue;  // setrlimit will say what failed
    s.limit = CapAtHardLimit(s.limit, inherited.rlim_max);
  }
  return settings;
}

struct rlimit CapAtHardLimit(struct rlimit wanted, rlim_t hard) {
  if (hard == RLIM_INFINITY) return wanted;
  return {std::min(wanted.rlim_cur, hard), std::min(wanted.rlim_max, hard)};
}

bool ApplyRlimits(const std::vector<RlimitSetting>& settings, int error_fd) {
  for (const RlimitSetting& s : settings) {
    if (::setrlimit(s.resource, &s.limit) != 0) {
      return ReportChildFailure(error_fd, "set resource limit", s.name, errno);
    }
  }
  return true;
}

}  // namespace moat::sandbox
