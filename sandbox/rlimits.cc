#include "sandbox/rlimits.h"

#include <cerrno>

#include "util/child_failure.h"

namespace moat::sandbox {

std::vector<RlimitSetting> PlanRlimits(absl::Duration cpu_timeout) {
  rlim_t cpu_seconds =
      static_cast<rlim_t>(absl::ToInt64Seconds(absl::Ceil(cpu_timeout, absl::Seconds(1)))) + 2;
  return {
      {RLIMIT_CORE, {0, 0}, "RLIMIT_CORE"},
      {RLIMIT_CPU, {cpu_seconds, cpu_seconds + 1}, "RLIMIT_CPU"},
      {RLIMIT_NOFILE, {4096, 4096}, "RLIMIT_NOFILE"},
  };
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
