#include "sandbox/cgroup/cgroup_v1.h"

#include <fcntl.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "sandbox/cgroup/cgroup_spares.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

using cgroupfs::Exists;
using cgroupfs::ReadFile;
using cgroupfs::WriteFile;

// A hierarchy that also carries cpuset (e.g. "cpu,cpuset") starts new cgroups with empty
// cpuset.cpus/mems, and the kernel refuses tasks there (ENOSPC): copy the parent's values.
absl::Status InheritCpuset(const std::string& dir) {
  if (!Exists(dir + "/cpuset.cpus")) return absl::OkStatus();
  const std::string parent = dir.substr(0, dir.rfind('/'));
  for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
    ASSIGN_OR_RETURN(std::string own, ReadFile(absl::StrCat(dir, "/", file)));
    if (!absl::StripAsciiWhitespace(own).empty()) continue;
    ASSIGN_OR_RETURN(std::string inherited, ReadFile(absl::StrCat(parent, "/", file)));
    RETURN_IF_ERROR(WriteFile(absl::StrCat(dir, "/", file), absl::StripAsciiWhitespace(inherited)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CgroupV1>> CgroupV1::Create(
    const std::map<std::string, std::string>& controllers, const std::string& name,
    const CgroupLimits& limits) {
  std::map<std::string, std::vector<std::string>> by_mount;
  for (const auto& [controller, mount] : controllers) by_mount[mount].push_back(controller);

  // Refuse a name in use before creating anything, so a failure leaves no trace.
  for (const auto& [mount, unused] : by_mount) {
    const std::string leaf = absl::StrCat(mount, "/", cgroupfs::kMoatDir, "/", name);
    if (!Exists(leaf)) continue;  // the usual case: one access(2) instead of a failed open
    ASSIGN_OR_RETURN(std::vector<pid_t> pids, cgroupfs::ListProcesses(leaf));
    if (!pids.empty()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "cgroup \"", leaf,
          "\" already exists and has processes: another sandbox uses the name \"", name,
          "\" (pick a unique name), or a crashed run left it (CleanupStaleCgroups)"));
    }
  }

  // From the first directory on, the object owns what exists: a failure removes it again.
  std::unique_ptr<CgroupV1> cgroup(new CgroupV1(name));
  bool reused = false;
  for (const auto& [mount, mount_controllers] : by_mount) {
    const std::string parent = absl::StrCat(mount, "/", cgroupfs::kMoatDir);
    const std::string leaf = absl::StrCat(parent, "/", name);
    // A spare was set up (cpuset included) when it was first made.
    bool claimed = cgroupfs::ClaimSpareCgroup(parent, name);
    if (!claimed) {
      RETURN_IF_ERROR(cgroupfs::MakeDir(parent).status());
      RETURN_IF_ERROR(InheritCpuset(parent));
      ASSIGN_OR_RETURN(bool created, cgroupfs::MakeDir(leaf));
      reused |= !created;
    }
    reused |= claimed;
    cgroup->dirs_.push_back(leaf);
    for (const std::string& controller : mount_controllers) cgroup->leaf_[controller] = leaf;
    if (!claimed) RETURN_IF_ERROR(InheritCpuset(leaf));
  }
  RETURN_IF_ERROR(cgroup->WriteLimits(limits, reused));
  if (reused) RETURN_IF_ERROR(cgroup->ResetCounters());
  if (cgroup->has("cpuacct")) {
    const std::string usage = cgroup->File("cpuacct", "cpuacct.usage");
    cgroup->cpuacct_usage_fd_.reset(::open(usage.c_str(), O_RDONLY | O_CLOEXEC));
    if (!cgroup->cpuacct_usage_fd_) return ErrnoStatus(absl::StrCat("open \"", usage, "\""));
  }
  return cgroup;
}

CgroupV1::~CgroupV1() {
  // A destructor cannot report; callers that care call Destroy() themselves.
  if (!destroyed_) Destroy().IgnoreError();
}

absl::Status CgroupV1::WriteLimits(const CgroupLimits& limits, bool reused) {
  if (has("cpu")) {
    RETURN_IF_ERROR(
        WriteFile(File("cpu", "cpu.cfs_period_us"), absl::StrCat(cgroupfs::kCpuPeriodUs)));
    RETURN_IF_ERROR(WriteFile(File("cpu", "cpu.cfs_quota_us"),
                              absl::StrCat(cgroupfs::CpuQuotaUs(limits.cpus))));
  }
  if (has("memory")) {
    const std::string bytes = absl::StrCat(limits.memory_bytes);
    const std::string limit = File("memory", "memory.limit_in_bytes");
    // memory+swap is only there with swap accounting; the kernel keeps it >= the memory limit.
    const std::string memsw = File("memory", "memory.memsw.limit_in_bytes");
    const bool has_memsw = Exists(memsw);
    absl::Status status = WriteFile(limit, bytes);
    if (status.code() == absl::StatusCode::kInvalidArgument && has_memsw) {
      // A reused cgroup whose memsw limit is below the new limit: raise memsw first.
      RETURN_IF_ERROR(WriteFile(memsw, bytes));
      status = WriteFile(limit, bytes);
    }
    RETURN_IF_ERROR(status);
    if (has_memsw) RETURN_IF_ERROR(WriteFile(memsw, bytes));
  }
  if (has("pids")) {
    RETURN_IF_ERROR(WriteFile(File("pids", "pids.max"), absl::StrCat(limits.pids)));
  }
  return absl::OkStatus();
}

absl::Status CgroupV1::ResetCounters() {
  // The directory is empty: nothing charges or counts while this runs, except the kernel
  // reclaiming (so lowering) memory still charged to it.
  if (has("cpuacct")) RETURN_IF_ERROR(WriteFile(File("cpuacct", "cpuacct.usage"), "0"));
  if (has("memory")) {
    // Writing 0 sets the high-water mark to the current usage: the page cache that earlier runs
    // read in and that is still charged here. That part is the baseline ReadUsage subtracts.
    RETURN_IF_ERROR(WriteFile(File("memory", "memory.max_usage_in_bytes"), "0"));
    const std::string usage_file = File("memory", "memory.usage_in_bytes");
    ASSIGN_OR_RETURN(std::string usage, ReadFile(usage_file));
    ASSIGN_OR_RETURN(memory_base_, cgroupfs::ParseCount(usage, usage_file));
    // oom_kill only grows (and exists since Linux 4.13).
    const std::string oom_file = File("memory", "memory.oom_control");
    ASSIGN_OR_RETURN(std::string oom, ReadFile(oom_file));
    oom_kills_base_ = cgroupfs::KeyedValue(oom, "oom_kill", oom_file).value_or(0);
  }
  if (has("pids")) {
    // pids.events cannot be reset either.
    ASSIGN_OR_RETURN(pids_max_base_,
                     cgroupfs::OptionalKeyedValue(File("pids", "pids.events"), "max"));
  }
  return absl::OkStatus();
}

absl::Status CgroupV1::AddProcess(pid_t pid) {
  if (destroyed_) return absl::FailedPreconditionError("add a process to a destroyed cgroup");
  const std::string value = absl::StrCat(pid);
  for (const std::string& dir : dirs_) {
    absl::Status status = WriteFile(absl::StrCat(dir, "/cgroup.procs"), value);
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrCat("move process ", pid, " into its sandbox cgroup: ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CgroupV1::ReadCpuNs() {
  if (destroyed_) return absl::FailedPreconditionError("read CPU time of a destroyed cgroup");
  if (!cpuacct_usage_fd_) {
    return absl::FailedPreconditionError("this cgroup has no cpuacct controller to read");
  }
  const std::string path = File("cpuacct", "cpuacct.usage");
  ASSIGN_OR_RETURN(std::string content, cgroupfs::PreadFile(cpuacct_usage_fd_.get(), path));
  return cgroupfs::ParseCount(content, path);
}

absl::StatusOr<CgroupUsage> CgroupV1::ReadUsage() {
  CgroupUsage usage;
  if (has("cpuacct")) {
    ASSIGN_OR_RETURN(usage.cpu_ns, ReadCpuNs());
  }
  if (has("memory")) {
    const std::string peak_file = File("memory", "memory.max_usage_in_bytes");
    ASSIGN_OR_RETURN(std::string peak, ReadFile(peak_file));
    ASSIGN_OR_RETURN(uint64_t peak_bytes, cgroupfs::ParseCount(peak, peak_file));
    // Saturating: charge left by earlier runs may have been reclaimed meanwhile.
    usage.memory_peak_bytes = peak_bytes > memory_base_ ? peak_bytes - memory_base_ : 0;
    const std::string oom_file = File("memory", "memory.oom_control");
    ASSIGN_OR_RETURN(std::string oom, ReadFile(oom_file));
    absl::StatusOr<uint64_t> kills = cgroupfs::KeyedValue(oom, "oom_kill", oom_file);
    // The oom_kill line exists since Linux 4.13; older kernels cannot say, so report none.
    if (!kills.ok() && kills.status().code() != absl::StatusCode::kNotFound) return kills.status();
    usage.oom_kills = kills.ok() && *kills > oom_kills_base_ ? *kills - oom_kills_base_ : 0;
  }
  if (has("pids")) {
    ASSIGN_OR_RETURN(uint64_t hits,
                     cgroupfs::OptionalKeyedValue(File("pids", "pids.events"), "max"));
    usage.pids_limit_hits = hits > pids_max_base_ ? hits - pids_max_base_ : 0;
  }
  return usage;
}

absl::Status CgroupV1::SetFreezerState(const std::string& state) {
  const std::string file = File("freezer", "freezer.state");
  RETURN_IF_ERROR(WriteFile(file, state));
  if (state != "FROZEN") return absl::OkStatus();
  // The state reads FREEZING until every task has stopped. A task stuck in the kernel can keep
  // it there; kill anyway after a short wait (the thaw that follows lets the signal act).
  const absl::Time deadline = absl::Now() + absl::Milliseconds(100);
  while (absl::Now() < deadline) {
    ASSIGN_OR_RETURN(std::string current, ReadFile(file));
    if (absl::StripAsciiWhitespace(current) == "FROZEN") break;
    absl::SleepFor(absl::Microseconds(200));
  }
  return absl::OkStatus();
}

absl::Status CgroupV1::KillAll() {
  if (destroyed_) return absl::OkStatus();
  cgroupfs::FreezeOps ops;
  if (has("freezer")) {
    ops.freeze = [this] { return SetFreezerState("FROZEN"); };
    ops.thaw = [this] { return SetFreezerState("THAWED"); };
  }
  return cgroupfs::KillUntilEmpty(dirs_, ops, cgroupfs::kKillTimeout);
}

absl::Status CgroupV1::Destroy() {
  if (destroyed_) return absl::OkStatus();
  // Try every rmdir even if killing failed: it removes what can go, and its error says what stays.
  absl::Status status = KillAll();
  for (const std::string& dir : dirs_) {
    status.Update(cgroupfs::RemoveTree(dir, cgroupfs::kRemoveTimeout));
  }
  if (!status.ok()) return status;
  cpuacct_usage_fd_.reset();
  destroyed_ = true;
  return absl::OkStatus();
}

absl::Status CgroupV1::Recycle() {
  if (destroyed_) return absl::OkStatus();
  // After a run the directories are normally empty already (the sandbox's processes die with
  // its init): one read of cgroup.procs and one stat each say so, cheaper than KillAll's walk.
  bool idle = true;
  for (const std::string& dir : dirs_) {
    absl::StatusOr<std::string> procs = ReadFile(dir + "/cgroup.procs");
    if (!procs.ok() || !procs->empty() || !cgroupfs::HasNoSubCgroups(dir)) {
      idle = false;
      break;
    }
  }
  // Destroy kills again and says what is stuck.
  if (!idle && !KillAll().ok()) return Destroy();
  bool keep_memory = true;
  if (has("memory")) {
    const std::string usage_file = File("memory", "memory.usage_in_bytes");
    absl::StatusOr<std::string> usage = ReadFile(usage_file);
    absl::StatusOr<uint64_t> bytes =
        usage.ok() ? cgroupfs::ParseCount(*usage, usage_file) : usage.status();
    keep_memory = bytes.ok() && *bytes <= kMaxSpareCharge;
  }
  absl::Status status;
  for (const std::string& dir : dirs_) {
    const bool is_memory = has("memory") && leaf_.at("memory") == dir;
    if ((keep_memory || !is_memory) && (idle || cgroupfs::HasNoSubCgroups(dir)) &&
        cgroupfs::ReturnSpareCgroup(dir)) {
      continue;
    }
    status.Update(cgroupfs::RemoveTree(dir, cgroupfs::kRemoveTimeout));
  }
  if (!status.ok()) return status;
  cpuacct_usage_fd_.reset();
  destroyed_ = true;
  return absl::OkStatus();
}

}  // namespace moat::sandbox
