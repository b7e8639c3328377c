#include "sandbox/cgroup/cgroup_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "util/errno_status.h"
#include "util/status_macros.h"
#include "util/unique_fd.h"

namespace moat::sandbox::cgroupfs {
namespace {

// An errno status; permission problems also say how to get the permission.
absl::Status FsError(absl::string_view what, int errno_value) {
  absl::Status status = ErrnoStatus(what, errno_value);
  if (errno_value == EACCES || errno_value == EPERM || errno_value == EROFS) {
    return absl::Status(status.code(), absl::StrCat(status.message(), "; ", kPermissionAdvice));
  }
  return status;
}

// Raw system calls: glibc 2.36's <sys/pidfd.h> lacks extern "C" and cannot be used from C++.
int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int PidfdKill(int pidfd) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0));
}

// Subdirectories of `dir` (sub-cgroups); a missing `dir` has none.
absl::StatusOr<std::vector<std::string>> SubDirs(const std::string& dir) {
  std::vector<std::string> subdirs;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return subdirs;
    return FsError(absl::StrCat("list cgroup \"", dir, "\""), errno);
  }
  while (struct dirent* entry = ::readdir(d)) {
    absl::string_view name = entry->d_name;
    if (entry->d_type != DT_DIR || name == "." || name == "..") continue;
    subdirs.push_back(absl::StrCat(dir, "/", name));
  }
  ::closedir(d);
  return subdirs;
}

absl::StatusOr<std::set<pid_t>> ListedIn(const std::vector<std::string>& dirs) {
  std::set<pid_t> listed;
  for (const std::string& dir : dirs) {
    ASSIGN_OR_RETURN(std::vector<pid_t> pids, ListProcesses(dir));
    listed.insert(pids.begin(), pids.end());
  }
  return listed;
}

}  // namespace

uint64_t CpuQuotaUs(double cpus) {
  // Rounded to the microsecond; ValidateCgroupRequest keeps it at or above the kernel's 1 ms.
  return static_cast<uint64_t>(cpus * static_cast<double>(kCpuPeriodUs) + 0.5);
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return FsError(absl::StrCat("open \"", path, "\""), errno);
  std::string content;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FsError(absl::StrCat("read \"", path, "\""), errno);
    if (n == 0) break;
    content.append(buf, static_cast<size_t>(n));
  }
  return content;
}

absl::Status WriteFile(const std::string& path, absl::string_view value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
  if (!fd) return FsError(absl::StrCat("open \"", path, "\" to write \"", value, "\""), errno);
  ssize_t n;
  do {
    n = ::write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return FsError(absl::StrCat("write \"", value, "\" to \"", path, "\""), errno);
  if (static_cast<size_t>(n) != value.size()) {
    return absl::InternalError(absl::StrCat("short write of \"", value, "\" to \"", path, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PreadFile(int fd, const std::string& path_for_errors) {
  std::string content;
  char buf[4096];
  off_t offset = 0;
  while (true) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FsError(absl::StrCat("read \"", path_for_errors, "\""), errno);
    if (n == 0) break;
    content.append(buf, static_cast<size_t>(n));
    offset += n;
  }
  return content;
}

absl::StatusOr<uint64_t> ParseCount(absl::string_view text, const std::string& path) {
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::DataLossError(
        absl::StrCat("expected a number in \"", path, "\", found \"", text, "\""));
  }
  return value;
}

absl::StatusOr<uint64_t> KeyedValue(absl::string_view text, absl::string_view key,
                                    const std::string& path) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ' ');
    if (kv.first == key) return ParseCount(kv.second, path);
  }
  return absl::NotFoundError(absl::StrCat("no \"", key, "\" line in \"", path, "\""));
}

absl::StatusOr<bool> MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return true;
  if (errno == EEXIST) return false;
  return FsError(absl::StrCat("create cgroup \"", path, "\""), errno);
}

absl::StatusOr<std::vector<pid_t>> ListProcesses(const std::string& dir) {
  std::vector<pid_t> pids;
  const std::string procs = absl::StrCat(dir, "/cgroup.procs");
  absl::StatusOr<std::string> content = ReadFile(procs);
  if (!content.ok()) {
    if (!Exists(dir)) return pids;  // already removed
    return content.status();
  }
  for (absl::string_view line : absl::StrSplit(*content, '\n', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(uint64_t pid, ParseCount(line, procs));
    pids.push_back(static_cast<pid_t>(pid));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> subdirs, SubDirs(dir));
  for (const std::string& subdir : subdirs) {
    ASSIGN_OR_RETURN(std::vector<pid_t> more, ListProcesses(subdir));
    pids.insert(pids.end(), more.begin(), more.end());
  }
  return pids;
}

absl::Status KillListed(const std::vector<pid_t>& pids, const std::vector<std::string>& dirs) {
  // Pin each process with a pidfd first; a pid still listed afterwards names the pinned process.
  std::vector<std::pair<pid_t, UniqueFd>> pinned;
  for (pid_t pid : pids) {
    if (pid <= 0) continue;  // a process in a pid namespace we cannot see
    int fd = PidfdOpen(pid);
    if (fd >= 0) {
      pinned.emplace_back(pid, UniqueFd(fd));
    } else if (errno == ENOSYS) {
      // Kernels before 5.3 have no pidfd: fall back to a plain kill, which can race with pid
      // reuse only if the process exits between the listing and the kill.
      if (::kill(pid, SIGKILL) != 0 && errno != ESRCH) {
        return ErrnoStatus(absl::StrCat("kill process ", pid, " of a sandbox cgroup"), errno);
      }
    } else if (errno != ESRCH) {
      return ErrnoStatus(absl::StrCat("pidfd_open for process ", pid, " of a sandbox cgroup"),
                         errno);
    }
  }
  if (pinned.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::set<pid_t> still_listed, ListedIn(dirs));
  for (const auto& [pid, fd] : pinned) {
    if (!still_listed.contains(pid)) continue;
    if (PidfdKill(fd.get()) != 0 && errno != ESRCH) {
      return ErrnoStatus(absl::StrCat("kill process ", pid, " of a sandbox cgroup"), errno);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> WaitUntilEmpty(const std::vector<std::string>& dirs, absl::Time deadline) {
  absl::Duration pause = absl::Microseconds(100);
  while (true) {
    ASSIGN_OR_RETURN(std::set<pid_t> listed, ListedIn(dirs));
    if (listed.empty()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(10));
  }
}

absl::Status KillUntilEmpty(const std::vector<std::string>& dirs, const FreezeOps& ops,
                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status first_error;  // reported only if the processes survive
  while (true) {
    ASSIGN_OR_RETURN(std::set<pid_t> listed, ListedIn(dirs));
    if (listed.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      std::string message = absl::StrCat(
          "kill the processes of cgroup \"", absl::StrJoin(dirs, "\", \""), "\": pids ",
          absl::StrJoin(listed, ","), " are still inside after ", absl::FormatDuration(timeout),
          " of SIGKILL (stuck in uninterruptible sleep?); retry later or reboot the node");
      if (!first_error.ok()) absl::StrAppend(&message, "; first error: ", first_error.message());
      return absl::DeadlineExceededError(message);
    }
    if (ops.freeze) first_error.Update(ops.freeze());
    // Re-read: while frozen, nothing can fork, so this list is complete.
    ASSIGN_OR_RETURN(std::set<pid_t> pids, ListedIn(dirs));
    first_error.Update(KillListed(std::vector<pid_t>(pids.begin(), pids.end()), dirs));
    // Killed tasks only die once thawed (v1 freezer), so thaw even after an error.
    if (ops.thaw) first_error.Update(ops.thaw());
    ASSIGN_OR_RETURN(
        bool empty,
        WaitUntilEmpty(dirs, std::min(deadline, absl::Now() + absl::Milliseconds(100))));
    if (empty) return absl::OkStatus();
  }
}

absl::Status RemoveTree(const std::string& dir, absl::Duration busy_timeout) {
  ASSIGN_OR_RETURN(std::vector<std::string> subdirs, SubDirs(dir));
  for (const std::string& subdir : subdirs) RETURN_IF_ERROR(RemoveTree(subdir, busy_timeout));
  const absl::Time deadline = absl::Now() + busy_timeout;
  absl::Duration pause = absl::Microseconds(100);
  while (::rmdir(dir.c_str()) != 0) {
    const int error = errno;
    if (error == ENOENT) break;
    if (error != EBUSY || absl::Now() >= deadline) {
      absl::Status status = FsError(absl::StrCat("remove cgroup \"", dir, "\""), error);
      if (error != EBUSY) return status;
      return absl::Status(
          status.code(),
          absl::StrCat(status.message(), " after ", absl::FormatDuration(busy_timeout),
                       "; processes are still inside, kill them first"));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> OptionalKeyedValue(const std::string& path, absl::string_view key) {
  absl::StatusOr<std::string> content = ReadFile(path);
  if (!content.ok()) {
    if (content.status().code() == absl::StatusCode::kNotFound) return 0;
    return content.status();
  }
  absl::StatusOr<uint64_t> value = KeyedValue(*content, key, path);
  if (!value.ok() && value.status().code() == absl::StatusCode::kNotFound) return 0;
  return value;
}

}  // namespace moat::sandbox::cgroupfs
