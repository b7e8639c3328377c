#include "node-agent/probe/probe_config.h"

#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "util/status_macros.h"

namespace moat::agent::probe {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("moat-probe: --", flag, " must be ", expected, "\n", kProbeUsage));
}

absl::StatusOr<int> ParseFd(absl::string_view flag, absl::string_view value) {
  int fd;
  if (!absl::SimpleAtoi(value, &fd) || fd < 0) return FlagError(flag, "a file descriptor number");
  return fd;
}

absl::StatusOr<uint64_t> ParsePositive(absl::string_view flag, absl::string_view value) {
  uint64_t n;
  if (!absl::SimpleAtoi(value, &n) || n == 0) return FlagError(flag, "a positive integer");
  return n;
}

}  // namespace

absl::StatusOr<ProbeConfig> ParseProbeFlags(int argc, const char* const* argv) {
  ProbeConfig config;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("moat-probe: unexpected argument \"", arg, "\"\n", kProbeUsage));
    }
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    const absl::string_view value = eq == arg.npos ? "" : arg.substr(eq + 1);
    if (name == "expected-mounts-from-start" && eq == arg.npos) {
      config.expected_mounts_from_start = true;
      continue;
    }
    if (eq == arg.npos) return FlagError(name, "given as --name=value");
    if (name == "pidfd-fd") {
      ASSIGN_OR_RETURN(config.pidfd_fd, ParseFd(name, value));
    } else if (name == "pid") {
      int pid;
      if (!absl::SimpleAtoi(value, &pid) || pid <= 0) return FlagError(name, "a process id");
      config.pid = pid;
    } else if (name == "report-fd") {
      ASSIGN_OR_RETURN(config.report_fd, ParseFd(name, value));
    } else if (name == "seccomp-fd") {
      ASSIGN_OR_RETURN(config.seccomp_fd, ParseFd(name, value));
    } else if (name == "arch") {
      if (value == "x86_64") {
        config.arch = sandbox::Arch::kX86_64;
      } else if (value == "aarch64") {
        config.arch = sandbox::Arch::kAarch64;
      } else {
        return FlagError(name, "x86_64 or aarch64");
      }
    } else if (name == "cgroup-dir") {
      if (!absl::StartsWith(value, "/")) return FlagError(name, "an absolute directory");
      config.cgroup_dirs.emplace_back(value);
    } else if (name == "interval") {
      if (!absl::ParseDuration(value, &config.interval) ||
          config.interval < absl::Milliseconds(10) || config.interval > absl::Hours(1)) {
        return FlagError(name, "a duration between 10ms and 1h, e.g. 5s or 100ms");
      }
    } else if (name == "memory-max") {
      ASSIGN_OR_RETURN(config.memory_max, ParsePositive(name, value));
    } else if (name == "pids-max") {
      ASSIGN_OR_RETURN(config.pids_max, ParsePositive(name, value));
    } else if (name == "cpu-seconds-max") {
      double s;
      if (!absl::SimpleAtod(value, &s) || !(s > 0) || s > std::numeric_limits<uint32_t>::max()) {
        return FlagError(name, "a positive number of seconds");
      }
      config.cpu_seconds_max = s;
    } else if (name == "sandbox-id") {
      if (value.empty()) return FlagError(name, "the sandbox's id");
      config.sandbox_id = std::string(value);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("moat-probe: unknown flag \"--", name, "\"\n", kProbeUsage));
    }
  }
  if ((config.pidfd_fd >= 0) == (config.pid > 0)) {
    return FlagError("pidfd-fd", "given, or else --pid (exactly one of the two)");
  }
  if (config.report_fd < 0) return FlagError("report-fd", "given");
  if (config.sandbox_id.empty()) return FlagError("sandbox-id", "given");
  if ((config.memory_max > 0 || config.pids_max > 0 || config.cpu_seconds_max) &&
      config.cgroup_dirs.empty()) {
    return FlagError("cgroup-dir", "given when a limit is checked");
  }
  return config;
}

}  // namespace moat::agent::probe
