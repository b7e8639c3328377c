#include "sandbox/reaper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/child_exec.h"
#include "sandbox/child_failure.h"
#include "sandbox/rlimits.h"

namespace moat::sandbox {
namespace {

// Init's state. Static: init is a clone of the supervisor and must not allocate; these pages
// become init's own on first write.
struct Running {
  uint32_t seq;
  pid_t pid;  // 0: free slot
};
Running running[kReaperMaxCommands];
char strings[kReaperMaxStrings + 1];
char* argv[kReaperMaxArgs + 1];
char* envp[kReaperMaxArgs + 1];

void Send(int sync_fd, const ReaperEvent& event) {
  // Blocking: the supervisor always reads; if it is gone, EPIPE, and the recv below sees EOF.
  while (::send(sync_fd, &event, sizeof(event), MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

void SendStarted(int sync_fd, uint32_t seq, pid_t pid, int error, const char* step) {
  ReaperEvent event = {};
  event.op = ReaperOp::kStarted;
  event.seq = seq;
  event.pid = pid;
  event.status = error;
  if (step != nullptr) std::strncpy(event.step, step, sizeof(event.step) - 1);
  Send(sync_fd, event);
}

// The command's side of the clone: the last steps, then execve. Never returns.
[[noreturn]] void BecomeCommand(const ContainPlan& plan, const int fds[3], const char* cwd,
                                const char* search_path, int error_fd) {
  if (::setsid() < 0)
    ReportChildFailure(error_fd, "new session (setsid)", nullptr, errno), _exit(125);
  ResetSignals();
  if (::dup2(fds[0], 0) < 0 || ::dup2(fds[1], 1) < 0 || ::dup2(fds[2], 2) < 0) {
    ReportChildFailure(error_fd, "connect standard input and output", nullptr, errno);
    ::_exit(125);
  }
  if (::chdir(cwd) != 0) {
    ReportChildFailure(error_fd, "change to the working directory", nullptr, errno);
    ::_exit(125);
  }
  if (!ApplyRlimits(plan.rlimits, error_fd)) ::_exit(125);
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    ReportChildFailure(error_fd, "mark descriptors close-on-exec (close_range)", nullptr, errno);
    ::_exit(125);
  }
  ExecSearchingPath(argv[0], argv, envp, search_path);
  const int e = errno;
  ReportChildFailure(error_fd, "execve", nullptr, e);
  ::_exit(e == ENOENT ? 127 : 126);
}

// Splits the request's strings into cwd, argv and envp; false if they do not add up.
bool ParseStrings(const ReaperRequest& req, size_t len, const char** cwd,
                  const char** search_path) {
  if (req.argc == 0 || req.argc + req.envc > kReaperMaxArgs || req.strings_len != len) {
    return false;
  }
  strings[len] = '\0';
  char* at = strings;
  char* const end = strings + len;
  auto next = [&]() -> char* {
    if (at >= end) return nullptr;
    char* s = at;
    at += std::strlen(at) + 1;
    return at <= end ? s : nullptr;
  };
  *cwd = next();
  if (*cwd == nullptr) return false;
  for (uint32_t i = 0; i < req.argc; ++i) {
    if ((argv[i] = next()) == nullptr) return false;
  }
  argv[req.argc] = nullptr;
  *search_path = "";
  for (uint32_t i = 0; i < req.envc; ++i) {
    if ((envp[i] = next()) == nullptr) return false;
    if (std::strncmp(envp[i], "PATH=", 5) == 0) *search_path = envp[i] + 5;
  }
  envp[req.envc] = nullptr;
  return at == end;
}

void StartCommand(const ContainPlan& plan, const ReaperRequest& req, size_t strings_len,
                  const int fds[3]) {
  const int sync_fd = plan.sync_fd;
  const char* cwd = nullptr;
  const char* search_path = nullptr;
  if (!ParseStrings(req, strings_len, &cwd, &search_path)) {
    SendStarted(sync_fd, req.seq, 0, EINVAL, "read the command request");
    return;
  }
  Running* slot = nullptr;
  for (Running& r : running) {
    if (r.pid == 0) {
      slot = &r;
      break;
    }
  }
  if (slot == nullptr) {
    SendStarted(sync_fd, req.seq, 0, EAGAIN, "too many commands running");
    return;
  }
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    SendStarted(sync_fd, req.seq, 0, errno, "create the start pipe");
    return;
  }
  // A raw clone, as for init itself: no atfork handlers, nothing that could take a lock.
  long pid = ::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) {
    ::close(error_pipe[0]);
    BecomeCommand(plan, fds, cwd, search_path, error_pipe[1]);
  }
  const int clone_errno = errno;
  ::close(error_pipe[1]);
  if (pid < 0) {
    ::close(error_pipe[0]);
    SendStarted(sync_fd, req.seq, 0, clone_errno, "start the command (clone)");
    return;
  }
  slot->seq = req.seq;
  slot->pid = static_cast<pid_t>(pid);
  ChildFailure failure;
  ssize_t n;
  do {
    n = ::read(error_pipe[0], &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  ::close(error_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    // Its exit (126/127 after a failed execve, 125 before) still comes as an Exited event.
    SendStarted(sync_fd, req.seq, static_cast<pid_t>(pid), failure.error, failure.step);
  } else {
    SendStarted(sync_fd, req.seq, static_cast<pid_t>(pid), 0, nullptr);
  }
}

void SignalCommand(const ReaperRequest& req) {
  if (req.signal <= 0 || req.signal >= NSIG) return;
  for (const Running& r : running) {
    if (r.pid != 0 && r.seq == req.seq) {
      // Its process group (setsid made it the leader); the command itself if it left the group
      // and nobody is left in it. Never both: a handler would run twice.
      if (::kill(-r.pid, req.signal) != 0) ::kill(r.pid, req.signal);
      return;
    }
  }
}

void ReapChildren(int sync_fd) {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (Running& r : running) {
      if (r.pid == pid) {
        ReaperEvent event = {};
        event.op = ReaperOp::kExited;
        event.seq = r.seq;
        event.pid = pid;
        event.status = status;
        r.pid = 0;
        Send(sync_fd, event);
        break;
      }
    }
  }
}

void CloseReceived(const int fds[3]) {
  for (int i = 0; i < 3; ++i) {
    if (fds[i] >= 0) ::close(fds[i]);
  }
}

}  // namespace

void RunReaper(const ContainPlan& plan) {
  const int sync_fd = plan.sync_fd;
  // Keep nothing but the socket: the setup's descriptors (pipes of the start handshake) must not
  // reach commands, and are closed on exec anyway.
  ::close_range(0, sync_fd - 1, 0);
  ::close_range(sync_fd + 1, ~0U, 0);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) ::_exit(125);

  for (;;) {
    struct pollfd pfds[2] = {{sync_fd, POLLIN, 0}, {sigfd, POLLIN, 0}};
    if (::poll(pfds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      ::_exit(125);
    }
    if (pfds[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (::read(sigfd, &info, sizeof(info)) > 0) {
      }
      ReapChildren(sync_fd);
    }
    if (pfds[0].revents == 0) continue;

    ReaperRequest req = {};
    struct iovec iov[2] = {{&req, sizeof(req)}, {strings, kReaperMaxStrings}};
    alignas(struct cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
    struct msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(sync_fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(0);  // the supervisor is gone: end the sandbox
    int fds[3] = {-1, -1, -1};
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(3 * sizeof(int))) {
        std::memcpy(fds, CMSG_DATA(c), sizeof(fds));
      }
    }
    if (static_cast<size_t>(n) < sizeof(req) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
      CloseReceived(fds);
      if (static_cast<size_t>(n) >= sizeof(ReaperOp) + sizeof(uint32_t) &&
          req.op == ReaperOp::kExec) {
        SendStarted(sync_fd, req.seq, 0, EMSGSIZE, "read the command request");
      }
      continue;
    }
    if (req.op == ReaperOp::kExec) {
      if (fds[0] < 0) {
        SendStarted(sync_fd, req.seq, 0, EBADF, "receive the command's standard streams");
      } else {
        StartCommand(plan, req, static_cast<size_t>(n) - sizeof(req), fds);
      }
    } else if (req.op == ReaperOp::kSignal) {
      SignalCommand(req);
    }
    CloseReceived(fds);
  }
}

}  // namespace moat::sandbox
