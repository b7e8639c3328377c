#include "sandbox/cgroup/cgroup_v2.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

using cgroupfs::Exists;
using cgroupfs::ReadFile;
using cgroupfs::WriteFile;

// True if /proc/<pid>/cgroup puts the process in a v2 cgroup whose path ends in `suffix`. The
// path is relative to our cgroup namespace root, so only the suffix is comparable.
bool InV2CgroupEndingWith(pid_t pid, absl::string_view suffix) {
  absl::StatusOr<std::string> content = ReadFile(absl::StrCat("/proc/", pid, "/cgroup"));
  if (!content.ok()) return false;
  for (absl::string_view line : absl::StrSplit(*content, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "0::")) return absl::EndsWith(line, suffix);
  }
  return false;
}

}  // namespace

absl::Status EnableSubtreeControllers(const std::string& dir,
                                      const std::set<std::string>& controllers) {
  const std::string file = absl::StrCat(dir, "/cgroup.subtree_control");
  ASSIGN_OR_RETURN(std::string content, ReadFile(file));
  std::vector<std::string> enabled =
      absl::StrSplit(content, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  std::vector<std::string> missing;
  for (const std::string& controller : controllers) {
    if (std::find(enabled.begin(), enabled.end(), controller) == enabled.end()) {
      missing.push_back(absl::StrCat("+", controller));
    }
  }
  if (missing.empty()) return absl::OkStatus();
  absl::Status status = WriteFile(file, absl::StrJoin(missing, " "));
  if (status.code() == absl::StatusCode::kFailedPrecondition) {
    // EBUSY: cgroup v2's "no internal processes" rule; only the real root is exempt.
    return absl::FailedPreconditionError(absl::StrCat(
        status.message(), "; \"", dir,
        "\" has processes of its own, so it cannot hand controllers to children: run moat from "
        "a cgroup whose own processes live in a child cgroup (e.g. `systemd-run --scope -p "
        "Delegate=yes moat ...`)"));
  }
  if (status.code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat(status.message(), "; a controller in \"",
                                            absl::StrJoin(missing, " "), "\" is not listed in \"",
                                            dir, "/cgroup.controllers\": enable it in the parent"));
  }
  return status;
}

absl::StatusOr<std::unique_ptr<CgroupV2>> CgroupV2::Create(const std::string& mount,
                                                           const std::set<std::string>& controllers,
                                                           const std::string& name,
                                                           const CgroupLimits& limits) {
  // A delegated unit's cgroup may hold moat itself (the agent, or `moat run` in a scope): cgroup
  // v2 lets a non-root cgroup hand domain controllers (memory) down only while it holds no
  // processes, and with threaded ones only (cpu, pids) it would turn into a thread root whose
  // children cannot take domain controllers. So moat moves itself into a child first. Not
  // from the root cgroup (no cgroup.type there), which is exempt; other processes in the unit
  // stay and make the write below fail with a message saying what to do.
  if (Exists(absl::StrCat(mount, "/cgroup.type"))) {
    ASSIGN_OR_RETURN(std::vector<pid_t> pids, cgroupfs::ListProcesses(mount));
    if (std::find(pids.begin(), pids.end(), ::getpid()) != pids.end()) {
      const std::string aside = absl::StrCat(mount, "/", kSupervisorDir);
      RETURN_IF_ERROR(cgroupfs::MakeDir(aside).status());
      RETURN_IF_ERROR(WriteFile(absl::StrCat(aside, "/cgroup.procs"), absl::StrCat(::getpid())));
    }
  }
  RETURN_IF_ERROR(EnableSubtreeControllers(mount, controllers));
  const std::string parent = absl::StrCat(mount, "/", cgroupfs::kMoatDir);
  RETURN_IF_ERROR(cgroupfs::MakeDir(parent).status());
  RETURN_IF_ERROR(EnableSubtreeControllers(parent, controllers));
  const std::string dir = absl::StrCat(parent, "/", name);
  ASSIGN_OR_RETURN(bool created, cgroupfs::MakeDir(dir));
  if (!created) {
    // A leftover of a crash is reused if empty; processes mean someone else's live sandbox.
    ASSIGN_OR_RETURN(std::vector<pid_t> pids, cgroupfs::ListProcesses(dir));
    if (!pids.empty()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "cgroup \"", dir, "\" already exists and has processes: another sandbox uses the name \"",
          name, "\" (pick a unique name), or a crashed run left it (CleanupStaleCgroups)"));
    }
  }
  // From here the object owns the directory: a failure below removes it in the destructor.
  std::unique_ptr<CgroupV2> cgroup(new CgroupV2(dir, name, controllers));
  RETURN_IF_ERROR(cgroup->WriteLimits(limits));
  RETURN_IF_ERROR(cgroup->OpenFiles());
  return cgroup;
}

CgroupV2::~CgroupV2() {
  // A destructor cannot report; callers that care call Destroy() themselves.
  if (!destroyed_) Destroy().IgnoreError();
}

absl::Status CgroupV2::WriteLimits(const CgroupLimits& limits) {
  if (controllers_.contains("cpu")) {
    RETURN_IF_ERROR(
        WriteFile(absl::StrCat(dir_, "/cpu.max"),
                  absl::StrCat(cgroupfs::CpuQuotaUs(limits.cpus), " ", cgroupfs::kCpuPeriodUs)));
  }
  if (controllers_.contains("memory")) {
    RETURN_IF_ERROR(
        WriteFile(absl::StrCat(dir_, "/memory.max"), absl::StrCat(limits.memory_bytes)));
    // Without swap accounting (no memory.swap.max) there is nothing to limit.
    const std::string swap_max = absl::StrCat(dir_, "/memory.swap.max");
    if (Exists(swap_max)) RETURN_IF_ERROR(WriteFile(swap_max, "0"));
  }
  if (controllers_.contains("pids")) {
    RETURN_IF_ERROR(WriteFile(absl::StrCat(dir_, "/pids.max"), absl::StrCat(limits.pids)));
  }
  return absl::OkStatus();
}

absl::Status CgroupV2::OpenFiles() {
  dir_fd_.reset(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd_) return ErrnoStatus(absl::StrCat("open cgroup \"", dir_, "\""));
  const std::string cpu_stat = absl::StrCat(dir_, "/cpu.stat");
  cpu_stat_fd_.reset(::open(cpu_stat.c_str(), O_RDONLY | O_CLOEXEC));
  if (!cpu_stat_fd_) return ErrnoStatus(absl::StrCat("open \"", cpu_stat, "\""));
  if (controllers_.contains("memory")) {
    const std::string peak = absl::StrCat(dir_, "/memory.peak");
    peak_file_ = Exists(peak) ? peak : absl::StrCat(dir_, "/memory.current");
  }
  return absl::OkStatus();
}

absl::Status CgroupV2::AddProcess(pid_t pid) {
  if (destroyed_) return absl::FailedPreconditionError("add a process to a destroyed cgroup");
  if (InV2CgroupEndingWith(pid, absl::StrCat("/", cgroupfs::kMoatDir, "/", name_))) {
    return absl::OkStatus();
  }
  absl::Status status = WriteFile(absl::StrCat(dir_, "/cgroup.procs"), absl::StrCat(pid));
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("move process ", pid, " into its sandbox cgroup: ", status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CgroupV2::ReadCpuNs() {
  if (destroyed_) return absl::FailedPreconditionError("read CPU time of a destroyed cgroup");
  const std::string path = absl::StrCat(dir_, "/cpu.stat");
  ASSIGN_OR_RETURN(std::string content, cgroupfs::PreadFile(cpu_stat_fd_.get(), path));
  ASSIGN_OR_RETURN(uint64_t usec, cgroupfs::KeyedValue(content, "usage_usec", path));
  return usec * 1000;
}

absl::StatusOr<CgroupUsage> CgroupV2::ReadUsage() {
  CgroupUsage usage;
  ASSIGN_OR_RETURN(usage.cpu_ns, ReadCpuNs());
  if (!peak_file_.empty()) {
    ASSIGN_OR_RETURN(std::string peak, ReadFile(peak_file_));
    ASSIGN_OR_RETURN(usage.memory_peak_bytes, cgroupfs::ParseCount(peak, peak_file_));
    const std::string events_file = absl::StrCat(dir_, "/memory.events");
    ASSIGN_OR_RETURN(std::string events, ReadFile(events_file));
    ASSIGN_OR_RETURN(usage.oom_kills, cgroupfs::KeyedValue(events, "oom_kill", events_file));
  }
  if (controllers_.contains("pids")) {
    ASSIGN_OR_RETURN(usage.pids_limit_hits,
                     cgroupfs::OptionalKeyedValue(absl::StrCat(dir_, "/pids.events"), "max"));
  }
  return usage;
}

absl::Status CgroupV2::Freeze(bool frozen) {
  RETURN_IF_ERROR(WriteFile(absl::StrCat(dir_, "/cgroup.freeze"), frozen ? "1" : "0"));
  if (!frozen) return absl::OkStatus();
  // Freezing is asynchronous; cgroup.events says when it is done. If it takes too long, kill
  // anyway: a fatal signal wakes a task that is frozen by cgroup v2.
  const std::string events_file = absl::StrCat(dir_, "/cgroup.events");
  const absl::Time deadline = absl::Now() + absl::Milliseconds(100);
  while (absl::Now() < deadline) {
    ASSIGN_OR_RETURN(std::string events, ReadFile(events_file));
    absl::StatusOr<uint64_t> is_frozen = cgroupfs::KeyedValue(events, "frozen", events_file);
    if (is_frozen.ok() && *is_frozen == 1) break;
    absl::SleepFor(absl::Microseconds(200));
  }
  return absl::OkStatus();
}

absl::Status CgroupV2::KillAll() {
  if (destroyed_) return absl::OkStatus();
  const std::string kill_file = absl::StrCat(dir_, "/cgroup.kill");
  if (!Exists(kill_file)) {
    // Before Linux 5.14: freeze so nothing forks while we kill what is listed.
    return cgroupfs::KillUntilEmpty(
        {dir_},
        {.freeze = [this] { return Freeze(true); }, .thaw = [this] { return Freeze(false); }},
        cgroupfs::kKillTimeout);
  }
  // cgroup.kill signals the whole subtree atomically, forks included; repeat until it is empty
  // in case of a process that was being moved in at that moment.
  const absl::Time deadline = absl::Now() + cgroupfs::kKillTimeout;
  while (true) {
    ASSIGN_OR_RETURN(std::vector<pid_t> pids, cgroupfs::ListProcesses(dir_));
    if (pids.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "kill the processes of cgroup \"", dir_, "\": pids ", absl::StrJoin(pids, ","),
          " are still inside after ", absl::FormatDuration(cgroupfs::kKillTimeout),
          " (stuck in uninterruptible sleep?); retry later or reboot the node"));
    }
    RETURN_IF_ERROR(WriteFile(kill_file, "1"));
    ASSIGN_OR_RETURN(bool empty,
                     cgroupfs::WaitUntilEmpty(
                         {dir_}, std::min(deadline, absl::Now() + absl::Milliseconds(100))));
    if (empty) return absl::OkStatus();
  }
}

absl::Status CgroupV2::Destroy() {
  if (destroyed_) return absl::OkStatus();
  // Try the rmdir even if killing failed: it removes what can go, and its error says what stays.
  absl::Status status = KillAll();
  status.Update(cgroupfs::RemoveTree(dir_, cgroupfs::kRemoveTimeout));
  if (!status.ok()) return status;
  dir_fd_.reset();
  cpu_stat_fd_.reset();
  destroyed_ = true;
  return absl::OkStatus();
}

}  // namespace moat::sandbox
