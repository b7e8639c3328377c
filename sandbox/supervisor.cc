#include "sandbox/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "sandbox/seccomp/seccomp_notify.h"
#include "util/errno_status.h"

namespace moat::sandbox {
namespace {

enum class KillReason { kNone, kWall, kCpu, kCancelled };

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the reader went away: keep draining, drop the bytes
    data.remove_prefix(n);
  }
}

// One output stream of the sandbox.
struct Stream {
  int fd;
  BoundedBuffer buffer;
  TerminalFilter filter;
  int live_fd;
  bool open = true;
};

class Supervisor {
 public:
  Supervisor(SandboxProcess& proc, Cgroup& cgroup, const SuperviseOptions& o)
      : proc_(proc),
        cgroup_(cgroup),
        o_(o),
        out_{proc.stdout_read.get(), BoundedBuffer(o.sanitize.max_bytes), {}, o.live_stdout_fd},
        err_{proc.stderr_read.get(), BoundedBuffer(o.sanitize.max_bytes), {}, o.live_stderr_fd} {}

  absl::StatusOr<RunResult> Run() {
    const absl::Time start = proc_.started;
    const absl::Time wall_deadline = start + o_.wall_timeout;
    absl::Time next_cpu_check = start + CpuCheckDelay(absl::ZeroDuration());
    std::optional<absl::Time> drain_deadline;
    bool stdin_open = proc_.stdin_write.valid() && o_.stdin_source_fd >= 0;
    if (stdin_open) ::fcntl(proc_.stdin_write.get(), F_SETFL, O_NONBLOCK);
    std::string stdin_pending;
    if (proc_.exec_error) {
      std::string line = *proc_.exec_error + "\n";
      if (o_.capture) {
        err_.buffer.Append(line);
      } else {
        WriteAll(err_.live_fd, line);
      }
    }

    while (!init_exited_ || out_.open || err_.open) {
      absl::Time now = absl::Now();
      if (init_exited_) {
        if (!drain_deadline) drain_deadline = now + absl::Seconds(1);
        if (now >= *drain_deadline) break;  // everything in the sandbox is dead; stop waiting
      } else if (reason_ == KillReason::kNone) {
        if (now >= wall_deadline) {
          Kill(KillReason::kWall);
        } else if (now >= next_cpu_check) {
          absl::StatusOr<uint64_t> cpu = cgroup_.ReadCpuNs();
          if (!cpu.ok()) return cpu.status();
          absl::Duration used = absl::Nanoseconds(*cpu);
          if (used >= o_.cpu_timeout) {
            Kill(KillReason::kCpu);
          } else {
            next_cpu_check = now + CpuCheckDelay(used);
          }
        }
      }

      std::array<struct pollfd, 7> pfds;
      int n = 0;
      auto add = [&](int fd, short events) {
        pfds[n] = {fd, events, 0};
        return n++;
      };
      int i_pid = init_exited_ ? -1 : add(proc_.pidfd.get(), POLLIN);
      int i_out = out_.open ? add(out_.fd, POLLIN) : -1;
      int i_err = err_.open ? add(err_.fd, POLLIN) : -1;
      int i_notify =
          proc_.seccomp_listener.valid() ? add(proc_.seccomp_listener.get(), POLLIN) : -1;
      int i_in_src = stdin_open && stdin_pending.empty() ? add(o_.stdin_source_fd, POLLIN) : -1;
      int i_in_dst =
          stdin_open && !stdin_pending.empty() ? add(proc_.stdin_write.get(), POLLOUT) : -1;
      int i_cancel =
          o_.cancel_fd >= 0 && reason_ == KillReason::kNone ? add(o_.cancel_fd, POLLIN) : -1;

      absl::Time wake = drain_deadline.value_or(reason_ == KillReason::kNone
                                                    ? std::min(wall_deadline, next_cpu_check)
                                                    : now + absl::Seconds(1));
      int timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(wake - now, absl::Milliseconds(1))), 0, 1000));
      int r = ::poll(pfds.data(), n, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoStatus("supervise the sandbox (poll)");

      if (i_cancel >= 0 && pfds[i_cancel].revents) Kill(KillReason::kCancelled);
      if (i_out >= 0 && pfds[i_out].revents) Pump(out_);
      if (i_err >= 0 && pfds[i_err].revents) Pump(err_);
      if (i_notify >= 0 && pfds[i_notify].revents) HandleNotification(pfds[i_notify].revents);
      if (i_in_src >= 0 && pfds[i_in_src].revents) {
        char buf[65536];
        ssize_t got = ::read(o_.stdin_source_fd, buf, sizeof(buf));
        if (got > 0) {
          stdin_pending.assign(buf, got);
        } else if (got == 0 || errno != EINTR) {
          stdin_open = false;
          proc_.stdin_write.reset();
        }
      }
      if (i_in_dst >= 0 && pfds[i_in_dst].revents) {
        ssize_t put = ::write(proc_.stdin_write.get(), stdin_pending.data(), stdin_pending.size());
        if (put > 0) {
          stdin_pending.erase(0, put);
        } else if (put < 0 && errno != EAGAIN && errno != EINTR) {
          stdin_open = false;  // the command closed its stdin
          proc_.stdin_write.reset();
        }
      }
      if (i_pid >= 0 && pfds[i_pid].revents) {
        Reap();
        end_ = absl::Now();
      }
    }
    if (!init_exited_) {  // cannot happen: the loop only ends after init exited
      Kill(KillReason::kNone);
      Reap();
    }
    // Answer whatever notifications are still queued, so their violations are counted.
    while (proc_.seccomp_listener.valid() && HandleNotification(POLLIN)) {
    }
    return Finish(start);
  }

 private:
  // CPU time can grow at most `cpus` seconds per wall second, so the limit cannot be crossed
  // before the remaining budget divided by the quota: no periodic polling needed.
  absl::Duration CpuCheckDelay(absl::Duration used) const {
    absl::Duration remaining = o_.cpu_timeout - used;
    return std::max(absl::Milliseconds(2), remaining / std::max(o_.cpus, 0.01));
  }

  void Kill(KillReason reason) {
    reason_ = reason;
    // Killing init makes the kernel kill every other process in the pid namespace.
    ::syscall(SYS_pidfd_send_signal, proc_.pidfd.get(), SIGKILL, nullptr, 0);
    cgroup_.KillAll().IgnoreError();  // belt and braces: anything that escaped the pid namespace
  }

  void Reap() {
    int status;
    while (::waitpid(proc_.pid, &status, __WALL) < 0 && errno == EINTR) {
    }
    init_exited_ = true;
    // Init sends the command's wait status just before it exits.
    int command_status;
    if (::recv(proc_.sync.get(), &command_status, sizeof(command_status), MSG_DONTWAIT) ==
        sizeof(command_status)) {
      command_status_ = command_status;
    }
  }

  void Pump(Stream& s) {
    char buf[65536];
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      s.open = false;
      if (!o_.capture && o_.filter_live) WriteAll(s.live_fd, s.filter.Flush());
      return;
    }
    absl::string_view chunk(buf, n);
    if (o_.capture) {
      s.buffer.Append(chunk);
    } else if (o_.filter_live) {
      WriteAll(s.live_fd, s.filter.Filter(chunk));
    } else {
      WriteAll(s.live_fd, chunk);
    }
  }

  // Returns whether a notification was handled.
  bool HandleNotification(short revents) {
    if (!(revents & POLLIN)) {
      proc_.seccomp_listener.reset();  // POLLHUP: no process uses the filter any more
      return false;
    }
    struct pollfd pfd = {proc_.seccomp_listener.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 0) != 1 || !(pfd.revents & POLLIN)) return false;
    absl::StatusOr<SeccompRequest> request = ReceiveSeccompRequest(pfd.fd);
    if (!request.ok()) return true;  // the caller died before we received it
    if (o_.creation_guard != nullptr && o_.creation_guard->Takes(*request)) {
      o_.creation_guard->Submit(*request);
      return true;
    }
    absl::StatusOr<SeccompViolation> v = AnswerAsViolation(pfd.fd, *request, o_.arch);
    if (!v.ok()) return true;  // the caller died before we answered: nothing to record
    AddViolation("seccomp", absl::StrCat("blocked system call ", v->syscall));
    return true;
  }

  void AddViolation(std::string kind, std::string detail) {
    if (result_.violations.size() >= o_.max_violations) {
      ++result_.violations_dropped;
      return;
    }
    result_.violations.push_back({std::move(kind), std::move(detail)});
  }

  absl::StatusOr<RunResult> Finish(absl::Time start) {
    RunResult& r = result_;
    r.wall_seconds = absl::ToDoubleSeconds(end_ - start);
    absl::StatusOr<CgroupUsage> usage = cgroup_.ReadUsage();
    if (!usage.ok()) return usage.status();
    r.cpu_seconds = static_cast<double>(usage->cpu_ns) / 1e9;
    r.peak_memory_bytes = usage->memory_peak_bytes;

    if (reason_ == KillReason::kWall) {
      r.status = RunStatus::kWallTimeout;
      r.signal = SIGKILL;
    } else if (reason_ == KillReason::kCpu) {
      r.status = RunStatus::kCpuTimeout;
      r.signal = SIGKILL;
    } else if (reason_ == KillReason::kCancelled) {
      r.status = RunStatus::kSignaled;
      r.signal = SIGKILL;
      AddViolation("cancelled", "the supervisor was asked to stop; the sandbox was killed");
    } else if (command_status_ && WIFEXITED(*command_status_)) {
      r.exit_code = WEXITSTATUS(*command_status_);
      // `sh -c 'python3 ...'` exits 137 itself when the OOM killer ends its python: a failed
      // run with an OOM kill in its cgroup ended by OOM, whichever process was the victim.
      r.status =
          r.exit_code != 0 && usage->oom_kills > 0 ? RunStatus::kOomKilled : RunStatus::kExited;
    } else {
      // Killed by a signal, or init itself was killed (the OOM killer may pick it).
      int sig =
          command_status_ && WIFSIGNALED(*command_status_) ? WTERMSIG(*command_status_) : SIGKILL;
      r.signal = sig;
      if (sig == SIGKILL && usage->oom_kills > 0) {
        r.status = RunStatus::kOomKilled;
      } else if (sig == SIGXCPU) {
        r.status = RunStatus::kCpuTimeout;
      } else {
        r.status = RunStatus::kSignaled;
      }
    }
    if (usage->oom_kills > 0) {
      AddViolation("memory",
                   absl::StrCat(usage->oom_kills, " process(es) killed by the OOM killer at the ",
                                "memory limit"));
    }
    if (usage->pids_limit_hits > 0) {
      AddViolation("pids",
                   absl::StrCat(usage->pids_limit_hits, " fork(s) refused at the process limit"));
    }
    if (o_.capture) {
      r.stdout_text = SanitizeOutput(out_.buffer.data(), out_.buffer.overflowed(), o_.sanitize);
      r.stderr_text = SanitizeOutput(err_.buffer.data(), err_.buffer.overflowed(), o_.sanitize);
    }
    return std::move(r);
  }

  SandboxProcess& proc_;
  Cgroup& cgroup_;
  const SuperviseOptions& o_;
  Stream out_;
  Stream err_;
  bool init_exited_ = false;
  std::optional<int> command_status_;
  KillReason reason_ = KillReason::kNone;
  absl::Time end_ = absl::Now();
  RunResult result_;
};

}  // namespace

absl::StatusOr<RunResult> Supervise(SandboxProcess& proc, Cgroup& cgroup,
                                    const SuperviseOptions& options) {
  // Writing to the command's stdin after it exited, or to a live reader that went away, raises
  // SIGPIPE in this thread; its default action would kill the whole supervisor (in a daemon:
  // every sandbox). Blocked here, the write fails with EPIPE instead; a SIGPIPE left pending is
  // consumed before the mask is restored.
  sigset_t pipe_only, saved;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &saved);
  Supervisor supervisor(proc, cgroup, options);
  absl::StatusOr<RunResult> result = supervisor.Run();
  struct timespec no_wait = {0, 0};
  while (::sigtimedwait(&pipe_only, nullptr, &no_wait) == SIGPIPE) {
  }
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return result;
}

}  // namespace moat::sandbox
