#include "node-agent/probe/probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "sandbox/seccomp/seccomp_notify.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::agent::probe {
namespace {

// A resource at or above this share of its limit is "near" it.
constexpr double kNearLimit = 0.9;

// Raw system calls: glibc 2.36's <sys/pidfd.h> cannot be used from C++.
int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSignal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// The pid a pidfd refers to, from /proc/self/fdinfo ("Pid:\t<pid>", -1 once it has exited).
absl::StatusOr<pid_t> PidOfPidfd(int pidfd) {
  const std::string path = absl::StrCat("/proc/self/fdinfo/", pidfd);
  ASSIGN_OR_RETURN(std::string text, sandbox::cgroupfs::ReadFile(path));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Pid:")) continue;
    int pid;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &pid) && pid > 0) return pid;
    return absl::FailedPreconditionError(
        "moat-probe: the sandbox's init has already exited (--pidfd-fd)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("moat-probe: fd ", pidfd, " is not a pidfd (--pidfd-fd)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Probe>> Probe::Create(const ProbeConfig& config) {
  UniqueFd pidfd;
  pid_t pid = config.pid;
  if (config.pidfd_fd >= 0) {
    pidfd.reset(config.pidfd_fd);
    ASSIGN_OR_RETURN(pid, PidOfPidfd(pidfd.get()));
  } else {
    pidfd.reset(PidfdOpen(pid));
    if (!pidfd)
      return ErrnoStatus(absl::StrCat("moat-probe: pidfd_open(", pid, ") (--pid)"), errno);
  }
  ::fcntl(pidfd.get(), F_SETFD, FD_CLOEXEC);
  UniqueFd report(config.report_fd);
  ::fcntl(report.get(), F_SETFD, FD_CLOEXEC);
  ASSIGN_OR_RETURN(ReportChannel channel, ReportChannel::Create(std::move(report)));
  ASSIGN_OR_RETURN(CgroupWatch cgroup, CgroupWatch::Open(config.cgroup_dirs));
  std::unique_ptr<Probe> probe(
      new Probe(config, std::move(pidfd), pid, std::move(channel), std::move(cgroup)));
  // The OOM kill count from before the probe (a reused v1 cgroup's) is nobody's violation.
  if (absl::StatusOr<CgroupSample> first = probe->cgroup_.Read(); first.ok()) {
    probe->oom_kills_ = first->oom_kills;
  }
  if (config.seccomp_fd >= 0) {
    probe->seccomp_fd_.reset(config.seccomp_fd);
    ::fcntl(config.seccomp_fd, F_SETFD, FD_CLOEXEC);
  }
  if (config.expected_mounts_from_start) {
    ASSIGN_OR_RETURN(MountWatch mounts,
                     MountWatch::Start(absl::StrCat("/proc/", pid, "/mountinfo")));
    probe->mounts_ = std::move(mounts);
  }
  // Read the baseline while the init is known to be alive: a pid reused after it exited would
  // give some other process's table.
  if (probe->InitExited()) {
    return absl::FailedPreconditionError("moat-probe: the sandbox's init exited during start");
  }
  probe->timer_fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!probe->timer_fd_) return ErrnoStatus("moat-probe: timerfd_create", errno);
  const timespec interval = absl::ToTimespec(config.interval);
  const struct itimerspec spec = {interval, interval};
  if (::timerfd_settime(probe->timer_fd_.get(), 0, &spec, nullptr) != 0) {
    return ErrnoStatus("moat-probe: timerfd_settime", errno);
  }
  return probe;
}

bool Probe::InitExited() const {
  struct pollfd pfd = {pidfd_.get(), POLLIN, 0};
  return ::poll(&pfd, 1, 0) == 1;
}

void Probe::ReportError(const std::string& what) {
  if (what == last_error_) return;
  last_error_ = what;
  channel_.Send({{"type", "error"}, {"detail", what}});
}

void Probe::Kill(const std::string& kind, double value, double limit) {
  // Again at every tick while over: a process forked between the cgroup listing and the kill
  // would otherwise survive it.
  if (PidfdSignal(pidfd_.get(), SIGKILL) != 0 && errno != ESRCH) {
    ReportError(ErrnoStatus("moat-probe: kill the sandbox's init", errno).ToString());
  }
  if (absl::Status killed = cgroup_.KillAll(); !killed.ok()) ReportError(killed.ToString());
  if (killed_) return;
  killed_ = true;
  channel_.Send({{"type", "killed"}, {"kind", kind}, {"value", value}, {"limit", limit}});
}

void Probe::CheckLimits(const CgroupSample& sample) {
  auto near = [&](bool& flag, const char* kind, uint64_t value, uint64_t limit) {
    const bool now = limit > 0 && static_cast<double>(value) >= kNearLimit * limit;
    if (now && !flag) {
      channel_.Send({{"type", "near_limit"}, {"kind", kind}, {"value", value}, {"limit", limit}});
    }
    flag = now;
  };
  if (sample.memory_bytes) near(memory_near_, "memory", *sample.memory_bytes, config_.memory_max);
  near(pids_near_, "pids", sample.tasks.value_or(sample.processes), config_.pids_max);

  if (config_.cpu_seconds_max && sample.cpu_ns) {
    const double seconds = static_cast<double>(*sample.cpu_ns) / 1e9;
    if (seconds > *config_.cpu_seconds_max) Kill("cpu", seconds, *config_.cpu_seconds_max);
  }
  // The kernel's own enforcement of the memory limit: each process its OOM killer ended is a
  // violation, as `moat run` reports it. The sandbox lives on.
  if (sample.oom_kills) {
    if (*sample.oom_kills > oom_kills_.value_or(0)) {
      channel_.Send({{"type", "violation"},
                     {"kind", "memory"},
                     {"detail", absl::StrCat(*sample.oom_kills - oom_kills_.value_or(0),
                                             " process(es) killed by the OOM killer at the "
                                             "memory limit")}});
    }
    oom_kills_ = sample.oom_kills;
  }
  // The kernel enforces memory.max itself; usage above it means it did not (a v1 hierarchy
  // without swap accounting, a limit that could not be written).
  if (config_.memory_max > 0 && sample.memory_bytes && *sample.memory_bytes > config_.memory_max) {
    Kill("memory", static_cast<double>(*sample.memory_bytes),
         static_cast<double>(config_.memory_max));
  }
}

void Probe::CheckMounts() {
  if (!mounts_) return;
  absl::StatusOr<std::vector<MountChange>> changes = mounts_->Check();
  // Whatever was read belongs to our init only if it is still alive afterwards; if it exited,
  // the pidfd says so and Run ends.
  if (InitExited()) return;
  if (!changes.ok()) {
    ReportError(changes.status().ToString());
    return;
  }
  for (const MountChange& change : *changes) {
    channel_.Send({{"type", "violation"}, {"kind", "mount"}, {"detail", change.Describe()}});
  }
}

void Probe::Tick() {
  absl::StatusOr<CgroupSample> sample = cgroup_.Read();
  if (!sample.ok()) {
    ReportError(sample.status().ToString());
    sample = CgroupSample{};
  }
  nlohmann::json heartbeat = {{"type", "heartbeat"}, {"processes", sample->processes}};
  if (sample->tasks) heartbeat["tasks"] = *sample->tasks;
  if (sample->memory_bytes) heartbeat["memory_bytes"] = *sample->memory_bytes;
  if (sample->cpu_ns) heartbeat["cpu_seconds"] = static_cast<double>(*sample->cpu_ns) / 1e9;
  channel_.SendHeartbeat(std::move(heartbeat));
  CheckLimits(*sample);
  CheckMounts();
}

void Probe::HandleSeccomp() {
  absl::StatusOr<sandbox::SeccompRequest> request =
      sandbox::ReceiveSeccompRequest(seccomp_fd_.get());
  if (absl::IsNotFound(request.status())) return;  // the caller died or was interrupted
  if (!request.ok()) {
    ReportError(request.status().ToString());
    seccomp_fd_.reset();  // unusable; without a listener the kernel fails such calls (ENOSYS)
    return;
  }
  // Reported before the answer: the call returns (and the command can end) only once its line
  // is in the pipe, so the agent settling a command's reports (ProbeMonitor::Settle) sees it.
  const sandbox::SeccompViolation described =
      sandbox::DescribeSeccompRequest(*request, config_.arch);
  nlohmann::json line = {{"type", "violation"}, {"kind", "syscall"}, {"detail", described.syscall}};
  if (described.pid > 0) line["pid"] = described.pid;
  channel_.Send(std::move(line));
  absl::StatusOr<sandbox::SeccompViolation> answered =
      sandbox::AnswerAsViolation(seccomp_fd_.get(), *request, config_.arch);
  if (!answered.ok() && !absl::IsNotFound(answered.status())) {
    ReportError(answered.status().ToString());
    seccomp_fd_.reset();
  }
}

void Probe::Drain(absl::Duration budget) {
  const absl::Time deadline = absl::Now() + budget;
  channel_.Flush();
  while (channel_.has_pending() && !channel_.reader_gone()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    struct pollfd pfd = {channel_.fd(), POLLOUT, 0};
    ::poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    channel_.Flush();
  }
}

int Probe::Run() {
  channel_.Send({{"type", "started"},
                 {"sandbox", config_.sandbox_id},
                 {"pid", pid_},
                 {"probe_pid", ::getpid()},
                 {"interval_ms", absl::ToInt64Milliseconds(config_.interval)}});
  Tick();
  while (true) {
    struct pollfd fds[4];
    int n = 0;
    fds[n++] = {pidfd_.get(), POLLIN, 0};
    fds[n++] = {timer_fd_.get(), POLLIN, 0};
    const int seccomp_slot = seccomp_fd_ ? n : -1;
    if (seccomp_fd_) fds[n++] = {seccomp_fd_.get(), POLLIN, 0};
    const int report_slot = channel_.has_pending() && !channel_.reader_gone() ? n : -1;
    if (report_slot >= 0) fds[n++] = {channel_.fd(), POLLOUT, 0};
    if (::poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;
      ReportError(ErrnoStatus("moat-probe: poll", errno).ToString());
      Drain(absl::Seconds(1));
      return 1;
    }
    if (fds[0].revents != 0) {
      channel_.Send({{"type", "exited"}});
      Drain(absl::Seconds(1));
      return 0;
    }
    if (seccomp_slot >= 0 && fds[seccomp_slot].revents != 0) {
      if (fds[seccomp_slot].revents & POLLIN) {
        HandleSeccomp();
      } else {
        seccomp_fd_.reset();  // POLLHUP: no task uses the filter any more
      }
    }
    if (fds[1].revents & POLLIN) {
      uint64_t expirations;
      if (::read(timer_fd_.get(), &expirations, sizeof(expirations)) > 0) Tick();
    }
    if (report_slot >= 0 && fds[report_slot].revents != 0) channel_.Flush();
  }
}

}  // namespace moat::agent::probe
