#include "sandbox/spawn.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/child_failure.h"
#include "util/errno_status.h"
#include "util/fd_passing.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

constexpr uint64_t kNamespaces =
    CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC;

// Descriptors at 3 or above and close-on-exec: the child moves them onto 0, 1 and 2 itself.
absl::Status MakePipe(UniqueFd* read_end, UniqueFd* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("create a pipe");
  for (int& fd : fds) {
    if (fd < 3) {
      int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
      ::close(fd);
      if (moved < 0) return ErrnoStatus("move a pipe above stdio");
      fd = moved;
    }
  }
  read_end->reset(fds[0]);
  write_end->reset(fds[1]);
  return absl::OkStatus();
}

std::string Advice(StepNeeds needs, int error) {
  switch (needs) {
    case StepNeeds::kUserNamespaces:
      return "check that user namespaces are enabled (sysctl user.max_user_namespaces > 0; on "
             "Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0)";
    case StepNeeds::kNewMountApi:
      return "moat needs Linux >= 5.12 with mount namespaces available to user namespaces";
    case StepNeeds::kSeccompNotify:
      return "moat needs a kernel with seccomp filters and user notification (Linux >= 5.5)";
    case StepNeeds::kNothingSpecial:
      break;
  }
  if (error == EACCES || error == EPERM) return "check the path's permissions and the policy";
  return "see docs/operations.md for what each step needs";
}

}  // namespace

absl::Status ChildFailureStatus(const ChildFailure& f) {
  std::string what = f.step ? f.step : "unknown step";
  if (f.detail) absl::StrAppend(&what, " \"", f.detail, "\"");
  return absl::Status(ErrnoToCode(f.error),
                      absl::StrCat("sandbox setup failed at step: ", what, ": ", strerror(f.error),
                                   " (", Advice(f.needs, f.error), ")"));
}

namespace {

void KillAndReap(pid_t pid, int pidfd) {
  if (pidfd >= 0) {
    ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
  } else {
    ::kill(pid, SIGKILL);
  }
  while (::waitpid(pid, nullptr, __WALL) < 0 && errno == EINTR) {
  }
}

// Waits for the error pipe: EOF means execve happened (or the command's process ended).
absl::StatusOr<std::optional<ChildFailure>> AwaitStart(int error_fd, absl::Duration timeout) {
  ChildFailure failure;
  size_t got = 0;
  absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    struct pollfd pfd = {error_fd, POLLIN, 0};
    int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0) return absl::DeadlineExceededError("sandbox setup did not finish in time");
    int r = ::poll(&pfd, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("wait for the sandbox to start (poll)");
    if (r == 0) continue;
    ssize_t n = ::read(error_fd, reinterpret_cast<char*>(&failure) + got, sizeof(failure) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read the sandbox's setup report");
    if (n == 0) {
      if (got == 0) return std::optional<ChildFailure>();
      return absl::InternalError("sandbox setup report was cut short");
    }
    got += n;
    if (got == sizeof(failure)) return std::optional<ChildFailure>(failure);
  }
}

// The plan's sockets, from init: the message it sends once its loopback is up. EOF (init gave
// up: its report says why) or a timeout is an error.
absl::StatusOr<std::vector<UniqueFd>> ReceiveSockets(int sync_fd, size_t count,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    struct pollfd pfd = {sync_fd, POLLIN, 0};
    int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0)
      return absl::DeadlineExceededError("the sandbox did not send its listeners in time");
    int r = ::poll(&pfd, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("wait for the sandbox's listeners (poll)");
    if (r > 0) break;
  }
  int fds[kMaxPassedFds];
  int n;
  do {
    n = ReceiveFds(sync_fd, kSocketsTag, fds, kMaxPassedFds, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus("receive the sandbox's listeners");
  std::vector<UniqueFd> sockets;
  for (int i = 0; i < n; ++i) sockets.emplace_back(fds[i]);
  if (sockets.size() != count) {
    return absl::InternalError(absl::StrCat("the sandbox sent ", n, " listeners, not ", count));
  }
  return sockets;
}

absl::Status SendByte(int sock, char c) {
  if (::send(sock, &c, 1, MSG_NOSIGNAL) != 1) return ErrnoStatus("signal the sandbox");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SandboxProcess> SpawnSandbox(ContainPlan& plan, const SpawnOptions& options) {
  if (options.cgroup == nullptr && !options.make_cgroup) {
    return absl::InvalidArgumentError("a sandbox needs a cgroup");
  }
  if (plan.seccomp == nullptr)
    return absl::InvalidArgumentError("a sandbox needs a seccomp filter");
  SandboxProcess proc;

  // Descriptors: child ends are closed here once the child has its copies.
  UniqueFd stdout_w, stderr_w, stdin_r, error_r, error_w;
  RETURN_IF_ERROR(MakePipe(&proc.stdout_read, &stdout_w));
  RETURN_IF_ERROR(MakePipe(&proc.stderr_read, &stderr_w));
  RETURN_IF_ERROR(MakePipe(&error_r, &error_w));
  if (options.pipe_stdin) {
    RETURN_IF_ERROR(MakePipe(&stdin_r, &proc.stdin_write));
  } else {
    stdin_r.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!stdin_r) return ErrnoStatus("open \"/dev/null\" for the command's stdin");
    if (stdin_r.get() < 3) {
      stdin_r.reset(::fcntl(stdin_r.get(), F_DUPFD_CLOEXEC, 3));
    }
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus("create the supervisor socket");
  }
  proc.sync.reset(sv[0]);
  UniqueFd child_sync(sv[1]);

  plan.stdin_fd = stdin_r.get();
  plan.stdout_fd = stdout_w.get();
  plan.stderr_fd = stderr_w.get();
  plan.sync_fd = child_sync.get();
  plan.error_fd = error_w.get();

  int pidfd = -1;
  struct clone_args args = {};
  args.flags = kNamespaces | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  Cgroup* cgroup = options.cgroup;
  int cgroup_fd = cgroup != nullptr ? cgroup->clone_into_fd() : -1;
  if (cgroup_fd >= 0) {
    // cgroup v2: born inside its cgroup, no migration (and no RCU grace period) needed.
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup_fd);
  }
  // A prepared network namespace: this thread enters it just for clone3, so the child starts in
  // it, and leaves it right after (setns on a network namespace is per thread).
  UniqueFd own_netns;
  if (options.netns_fd >= 0) {
    own_netns.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!own_netns) return ErrnoStatus("open the supervisor's network namespace");
    if (::setns(options.netns_fd, CLONE_NEWNET) != 0) {
      return ErrnoStatus("enter the sandbox's prepared network namespace (setns)");
    }
    args.flags &= ~static_cast<uint64_t>(CLONE_NEWNET);
  }
  long pid = ::syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) ContainAndRun(plan);  // never returns
  int clone_errno = errno;
  if (own_netns && ::setns(own_netns.get(), CLONE_NEWNET) != 0) {
    // This thread would go on working inside the sandbox's network namespace.
    std::perror("moat: return to the supervisor's network namespace (setns)");
    std::abort();
  }
  errno = clone_errno;
  if (pid < 0) {
    int e = errno;
    return absl::Status(
        ErrnoToCode(e),
        absl::StrCat("sandbox setup failed at step: clone3 into new namespaces: ", strerror(e),
                     " (", Advice(StepNeeds::kUserNamespaces, e), ")"));
  }

  proc.pid = static_cast<pid_t>(pid);
  proc.pidfd.reset(pidfd);
  proc.started = absl::Now();
  auto kill_on_error = absl::MakeCleanup([&] { KillAndReap(proc.pid, proc.pidfd.get()); });
  stdout_w.reset();
  stderr_w.reset();
  stdin_r.reset();
  error_w.reset();
  child_sync.reset();

  // The child waits for its id maps, then builds its mounts while we attach the cgroup (the
  // slow part on cgroup v1), so the two overlap.
  proc.timeline.emplace_back("clone3", proc.started);
  absl::Status handshake = WriteIdMaps(proc.pid, plan.ids);
  if (handshake.ok()) handshake = SendByte(proc.sync.get(), kSyncIdsMapped);
  proc.timeline.emplace_back("id maps written", absl::Now());
  if (handshake.ok() && cgroup == nullptr) {
    absl::StatusOr<Cgroup*> made = options.make_cgroup();
    if (made.ok()) {
      cgroup = *made;
    } else {
      handshake = made.status();
    }
  }
  if (handshake.ok() && cgroup_fd < 0) handshake = cgroup->AddProcess(proc.pid);
  proc.timeline.emplace_back("in cgroup", absl::Now());
  if (handshake.ok() && !plan.sockets.empty()) {
    absl::StatusOr<std::vector<UniqueFd>> sockets =
        ReceiveSockets(proc.sync.get(), plan.sockets.size(), options.setup_timeout);
    if (!sockets.ok()) {
      handshake = sockets.status();
    } else if (!options.take_sockets) {
      handshake = absl::InvalidArgumentError("a plan with sockets needs take_sockets");
    } else {
      handshake = options.take_sockets(*std::move(sockets));
    }
    proc.timeline.emplace_back("listeners from the sandbox", absl::Now());
  }
  if (handshake.ok() && options.before_start) {
    handshake = options.before_start(proc.pidfd.get());
    proc.timeline.emplace_back("before-start hook", absl::Now());
  }
  if (handshake.ok()) handshake = SendByte(proc.sync.get(), kSyncInCgroup);
  if (!handshake.ok()) {
    // If the child gave up first, its report names the real cause (our send just saw EPIPE).
    KillAndReap(proc.pid, proc.pidfd.get());
    std::move(kill_on_error).Cancel();
    absl::StatusOr<std::optional<ChildFailure>> report =
        AwaitStart(error_r.get(), absl::Milliseconds(100));
    if (report.ok() && report->has_value()) return ChildFailureStatus(**report);
    return handshake;
  }

  ASSIGN_OR_RETURN(std::optional<ChildFailure> failure,
                   AwaitStart(error_r.get(), options.setup_timeout));
  if (failure.has_value()) {
    if (failure->step == nullptr || std::strcmp(failure->step, "execve") != 0) {
      return ChildFailureStatus(*failure);
    }
    // The sandbox is fine; the command could not be executed. Its exit status (126/127) comes
    // through the normal path.
    proc.exec_error =
        absl::StrCat("moat: cannot execute \"", failure->detail, "\": ", strerror(failure->error));
  }
  proc.timeline.emplace_back("command started", absl::Now());
  if (plan.seccomp_listener) {
    // Sent before execve, so it is already queued.
    proc.seccomp_listener.reset(ReceiveFd(proc.sync.get(), kListenerTag, MSG_DONTWAIT));
    if (!proc.seccomp_listener)
      return ErrnoStatus("seccomp: receive the listener from the sandbox");
  }
  std::move(kill_on_error).Cancel();
  return proc;
}

void KillSandbox(SandboxProcess& proc) { KillAndReap(proc.pid, proc.pidfd.get()); }

}  // namespace moat::sandbox
