#include "sandbox/cgroup/cgroup_watch.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace fs = cgroupfs;

absl::StatusOr<CgroupWatch> CgroupWatch::Open(const std::vector<std::string>& dirs) {
  CgroupWatch watch;
  watch.dirs_ = dirs;
  auto open_first = [&](std::optional<File>& slot, const std::string& dir,
                        const char* name) -> bool {
    if (slot) return false;
    std::string path = absl::StrCat(dir, "/", name);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return false;
    slot = File{std::move(fd), std::move(path)};
    return true;
  };
  for (const std::string& dir : dirs) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return ErrnoStatus(absl::StrCat("open cgroup directory \"", dir,
                                      "\" (--cgroup-dir must name the sandbox's existing cgroup)"),
                         errno ? errno : ENOTDIR);
    }
    open_first(watch.tasks_, dir, "pids.current");
    open_first(watch.memory_, dir, "memory.current") ||
        open_first(watch.memory_, dir, "memory.usage_in_bytes");
    open_first(watch.oom_, dir, "memory.events") ||
        open_first(watch.oom_, dir, "memory.oom_control");
    // v1's cpu.stat holds throttling counts, not usage: there CPU time is cpuacct.usage.
    if (fs::Exists(dir + "/cgroup.controllers")) {
      if (open_first(watch.cpu_, dir, "cpu.stat")) watch.cpu_is_v2_stat_ = true;
    } else {
      open_first(watch.cpu_, dir, "cpuacct.usage");
    }
    if (watch.kill_file_.empty() && fs::Exists(dir + "/cgroup.kill")) {
      watch.kill_file_ = dir + "/cgroup.kill";
    }
  }
  return watch;
}

absl::StatusOr<CgroupSample> CgroupWatch::Read() const {
  CgroupSample sample;
  if (dirs_.empty()) return sample;
  // Every hierarchy lists the same processes; the first is enough.
  ASSIGN_OR_RETURN(std::vector<pid_t> pids, fs::ListProcesses(dirs_.front()));
  sample.processes = static_cast<int>(pids.size());
  if (tasks_) {
    ASSIGN_OR_RETURN(std::string text, fs::PreadFile(tasks_->fd.get(), tasks_->path));
    ASSIGN_OR_RETURN(sample.tasks, fs::ParseCount(text, tasks_->path));
  }
  if (memory_) {
    ASSIGN_OR_RETURN(std::string text, fs::PreadFile(memory_->fd.get(), memory_->path));
    ASSIGN_OR_RETURN(sample.memory_bytes, fs::ParseCount(text, memory_->path));
  }
  if (oom_) {
    ASSIGN_OR_RETURN(std::string text, fs::PreadFile(oom_->fd.get(), oom_->path));
    // Older kernels' memory.oom_control has no oom_kill line: no figure then.
    absl::StatusOr<uint64_t> kills = fs::KeyedValue(text, "oom_kill", oom_->path);
    if (kills.ok()) sample.oom_kills = *kills;
  }
  if (cpu_) {
    ASSIGN_OR_RETURN(std::string text, fs::PreadFile(cpu_->fd.get(), cpu_->path));
    if (cpu_is_v2_stat_) {
      ASSIGN_OR_RETURN(uint64_t usec, fs::KeyedValue(text, "usage_usec", cpu_->path));
      sample.cpu_ns = usec * 1000;
    } else {
      ASSIGN_OR_RETURN(sample.cpu_ns, fs::ParseCount(text, cpu_->path));
    }
  }
  return sample;
}

absl::Status CgroupWatch::KillAll() const {
  if (!kill_file_.empty()) return fs::WriteFile(kill_file_, "1");
  for (const std::string& dir : dirs_) {
    ASSIGN_OR_RETURN(std::vector<pid_t> pids, fs::ListProcesses(dir));
    RETURN_IF_ERROR(fs::KillListed(pids, {dir}));
  }
  return absl::OkStatus();
}

absl::StatusOr<CgroupSample> ReadCgroupNow(const std::vector<std::string>& dirs) {
  ASSIGN_OR_RETURN(CgroupWatch watch, CgroupWatch::Open(dirs));
  return watch.Read();
}

}  // namespace moat::sandbox
