#include "node-agent/backend/adopted_cgroup.h"

#include "absl/strings/str_cat.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "util/status_macros.h"

namespace moat::agent {

namespace cgroupfs = sandbox::cgroupfs;

absl::StatusOr<std::unique_ptr<AdoptedCgroup>> AdoptedCgroup::Open(std::vector<std::string> paths) {
  if (paths.empty()) return absl::InvalidArgumentError("an adopted cgroup needs its directories");
  for (const std::string& path : paths) {
    if (!cgroupfs::Exists(absl::StrCat(path, "/cgroup.procs"))) {
      return absl::NotFoundError(absl::StrCat("cgroup \"", path, "\" is gone"));
    }
  }
  return std::unique_ptr<AdoptedCgroup>(new AdoptedCgroup(std::move(paths)));
}

AdoptedCgroup::~AdoptedCgroup() { Destroy().IgnoreError(); }

std::string AdoptedCgroup::Find(const std::string& file) const {
  for (const std::string& path : paths_) {
    std::string full = absl::StrCat(path, "/", file);
    if (cgroupfs::Exists(full)) return full;
  }
  return "";
}

absl::Status AdoptedCgroup::AddProcess(pid_t) {
  return absl::UnimplementedError("an adopted sandbox's cgroup takes no new process");
}

absl::StatusOr<uint64_t> AdoptedCgroup::ReadCpuNs() {
  if (std::string v2 = Find("cpu.stat"); !v2.empty()) {
    ASSIGN_OR_RETURN(std::string text, cgroupfs::ReadFile(v2));
    absl::StatusOr<uint64_t> usec = cgroupfs::KeyedValue(text, "usage_usec", v2);
    if (usec.ok()) return *usec * 1000;
  }
  if (std::string v1 = Find("cpuacct.usage"); !v1.empty()) {
    ASSIGN_OR_RETURN(std::string text, cgroupfs::ReadFile(v1));
    return cgroupfs::ParseCount(text, v1);
  }
  return absl::FailedPreconditionError("the adopted cgroup has no CPU accounting to read");
}

absl::StatusOr<sandbox::CgroupUsage> AdoptedCgroup::ReadUsage() {
  sandbox::CgroupUsage usage;
  usage.cpu_ns = ReadCpuNs().value_or(0);
  for (const char* file : {"memory.peak", "memory.max_usage_in_bytes"}) {
    if (std::string path = Find(file); !path.empty()) {
      absl::StatusOr<std::string> text = cgroupfs::ReadFile(path);
      if (text.ok()) usage.memory_peak_bytes = cgroupfs::ParseCount(*text, path).value_or(0);
      break;
    }
  }
  for (const char* file : {"memory.events", "memory.oom_control"}) {
    if (std::string path = Find(file); !path.empty()) {
      usage.oom_kills = cgroupfs::OptionalKeyedValue(path, "oom_kill").value_or(0);
      break;
    }
  }
  if (std::string path = Find("pids.events"); !path.empty()) {
    usage.pids_limit_hits = cgroupfs::OptionalKeyedValue(path, "max").value_or(0);
  }
  return usage;
}

absl::Status AdoptedCgroup::KillAll() {
  return cgroupfs::KillUntilEmpty(paths_, cgroupfs::FreezeOps{}, cgroupfs::kKillTimeout);
}

absl::Status AdoptedCgroup::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  RETURN_IF_ERROR(KillAll());
  for (const std::string& path : paths_) {
    RETURN_IF_ERROR(cgroupfs::RemoveTree(path, cgroupfs::kRemoveTimeout));
  }
  return absl::OkStatus();
}

}  // namespace moat::agent
