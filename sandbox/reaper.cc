#include "sandbox/reaper.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/child_exec.h"
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

// What the command's side of the clone hands back to init. The clone shares init's memory
// (CLONE_VM) and init waits until it has exec'd or exited (CLONE_VFORK), so a failure is simply
// written here; a successful execve leaves it untouched.
struct StartFailure {
  const char* step;
  int error;
};
StartFailure start_failure;

struct CommandStart {
  const RlimitSetting* rlimits;
  size_t n_rlimits;
  const int* fds;
  const char* cwd;
  const char* search_path;
};

// The child's stack: with CLONE_VM it must not run on init's.
alignas(64) char command_stack[64 * 1024];

[[noreturn]] void Fail(const char* step, int error, int code) {
  start_failure = {step, error};
  ::_exit(code);
}

// The command's side of the clone: the last steps, then execve. Never returns.
int BecomeCommand(void* arg) {
  const CommandStart& c = *static_cast<const CommandStart*>(arg);
  if (::setsid() < 0) Fail("new session (setsid)", errno, 125);
  ResetSignals();
  if (::dup2(c.fds[0], 0) < 0 || ::dup2(c.fds[1], 1) < 0 || ::dup2(c.fds[2], 2) < 0) {
    Fail("connect standard input and output", errno, 125);
  }
  if (::chdir(c.cwd) != 0) Fail("change to the working directory", errno, 125);
  for (size_t i = 0; i < c.n_rlimits; ++i) {
    if (::setrlimit(c.rlimits[i].resource, &c.rlimits[i].limit) != 0) {
      Fail("set resource limit", errno, 125);
    }
  }
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    Fail("mark descriptors close-on-exec (close_range)", errno, 125);
  }
  ExecSearchingPath(argv[0], argv, envp, c.search_path);
  const int e = errno;
  Fail("execve", e, e == ENOENT ? 127 : 126);
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

void StartCommand(int sync_fd, const RlimitSetting* rlimits, size_t n_rlimits,
                  const ReaperRequest& req, size_t strings_len, const int fds[3]) {
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
  // A vfork-style clone: no copy of init's page tables (init is itself a copy of the whole
  // supervisor, so a fork of it costs about a millisecond), and init sleeps until the command
  // has exec'd or failed, so it knows which without a pipe.
  start_failure = {nullptr, 0};
  CommandStart start = {rlimits, n_rlimits, fds, cwd, search_path};
  const int pid = ::clone(BecomeCommand, command_stack + sizeof(command_stack),
                          CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
  if (pid < 0) {
    SendStarted(sync_fd, req.seq, 0, errno, "start the command (clone)");
    return;
  }
  slot->seq = req.seq;
  slot->pid = static_cast<pid_t>(pid);
  // A failed start still ends with an Exited event (126/127 after execve, 125 before).
  SendStarted(sync_fd, req.seq, static_cast<pid_t>(pid), start_failure.error, start_failure.step);
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

void RunReaper(int sync_fd, const RlimitSetting* rlimits, size_t n_rlimits) {
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
        StartCommand(sync_fd, rlimits, n_rlimits, req, static_cast<size_t>(n) - sizeof(req), fds);
      }
    } else if (req.op == ReaperOp::kSignal) {
      SignalCommand(req);
    }
    CloseReceived(fds);
  }
}

}  // namespace moat::sandbox
