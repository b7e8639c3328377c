#include "sandbox/reaper.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
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
  pid_t pid;      // 0: free slot
  bool signaled;  // a Signal reached its tree: what is left of it when it exits is killed
  int out_r;      // with a restart grace: the read ends of its stdout and stderr pipes, or -1
  int err_r;
};
Running running[kReaperMaxCommands];
// With a restart grace, while no supervisor is connected: the commands that exited meanwhile.
struct Pending {
  uint32_t seq;
  pid_t pid;  // 0: free slot
  int status;
  int out_r;
  int err_r;
};
Pending pending[kReaperMaxCommands];
bool connected = true;

// A command's tree is every process descended from it, whatever session or group it put itself
// in (setsid leaves the group Signal addresses, not the tree). The command is a child subreaper
// (prctl, kept across execve), so while it lives, what its children orphan is reparented to it
// and stays in its tree. The tree is read from /proc: each process's parent from
// /proc/PID/stat (this kernel may lack /proc/PID/task/TID/children, CONFIG_PROC_CHILDREN).
constexpr size_t kMaxProcesses = 8192;
struct Process {
  pid_t pid;
  pid_t ppid;
  unsigned long long start;  // start time in clock ticks: a pid reused later differs
};
Process processes[kMaxProcesses];
size_t n_processes;
Process tree[kMaxProcesses];
// Members of signalled trees, kept until their command exits: then those still alive (same pid
// and start time) are killed, since they have been reparented to init and left the tree.
struct Tracked {
  uint32_t seq;
  Process process;
};
constexpr size_t kMaxTracked = 4096;
Tracked tracked[kMaxTracked];
alignas(8) char dirents[16384];
char stat_text[1024];
char strings[kReaperMaxStrings + 1];
char* argv[kReaperMaxArgs + 1];
char* envp[kReaperMaxArgs + 1];

// False if the supervisor is gone (EPIPE): the recv in the loop then sees EOF.
bool Send(int sync_fd, const ReaperEvent& event) {
  // Blocking: the supervisor always reads.
  for (;;) {
    if (::send(sync_fd, &event, sizeof(event), MSG_NOSIGNAL) >= 0) return true;
    if (errno != EINTR) return false;
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

// "/proc/<pid>/stat" into `out` (at least 32 bytes).
void StatPath(pid_t pid, char* out) {
  char digits[16];
  int n = 0;
  for (unsigned v = static_cast<unsigned>(pid); n == 0 || v != 0; v /= 10)
    digits[n++] = '0' + v % 10;
  std::memcpy(out, "/proc/", 6);
  int at = 6;
  while (n > 0) out[at++] = digits[--n];
  std::memcpy(out + at, "/stat", 6);
}

// Parent and start time of `pid` (fields 4 and 22 of /proc/PID/stat); false if it is gone.
bool ReadProcess(pid_t pid, Process* out) {
  char path[32];
  StatPath(pid, path);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::read(fd, stat_text, sizeof(stat_text) - 1);
  ::close(fd);
  if (n <= 0) return false;
  stat_text[n] = '\0';
  // The name (field 2) may hold spaces and parentheses: the fields after it start after the
  // last ')'.
  char* p = std::strrchr(stat_text, ')');
  if (p == nullptr) return false;
  ++p;
  unsigned long long fields[20] = {};  // fields 3.. ; 3 is the state letter
  int field = 3;
  while (*p != '\0' && field <= 22) {
    while (*p == ' ') ++p;
    unsigned long long v = 0;
    while (*p >= '0' && *p <= '9') v = v * 10 + static_cast<unsigned>(*p++ - '0');
    while (*p != ' ' && *p != '\0') ++p;
    if (field - 3 < 20) fields[field - 3] = v;
    ++field;
  }
  if (field <= 22) return false;
  out->pid = pid;
  out->ppid = static_cast<pid_t>(fields[4 - 3]);
  out->start = fields[22 - 3];
  return true;
}

// Every process of the sandbox (its /proc), into `processes`.
void ScanProcesses() {
  n_processes = 0;
  int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, dirents, sizeof(dirents));
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      auto* d = reinterpret_cast<struct dirent64*>(dirents + at);
      at += d->d_reclen;
      pid_t pid = 0;
      const char* name = d->d_name;
      if (*name < '1' || *name > '9') continue;
      for (; *name >= '0' && *name <= '9'; ++name) pid = pid * 10 + (*name - '0');
      if (*name != '\0' || n_processes == kMaxProcesses) continue;
      if (ReadProcess(pid, &processes[n_processes])) ++n_processes;
    }
  }
  ::close(dir);
}

// The descendants of `root` among `processes` (root not included), into `tree`; their count.
// Quadratic, but a sandbox holds at most its pids limit of processes.
size_t Descendants(pid_t root) {
  size_t n = 0;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < n_processes; ++i) {
      const Process& p = processes[i];
      bool known = false, parent_in = p.ppid == root;
      for (size_t j = 0; j < n && !known; ++j) {
        known = tree[j].pid == p.pid;
        parent_in = parent_in || tree[j].pid == p.ppid;
      }
      if (!known && parent_in && n < kMaxProcesses) {
        tree[n++] = p;
        grew = true;
      }
    }
  }
  return n;
}

void Track(uint32_t seq, const Process& p) {
  Tracked* free_slot = nullptr;
  for (Tracked& t : tracked) {
    if (t.process.pid == p.pid && t.seq == seq) return;
    if (free_slot == nullptr && t.process.pid == 0) free_slot = &t;
  }
  if (free_slot != nullptr) *free_slot = {seq, p};
}

// The command `seq` has exited after a Signal: what is left of its tree dies.
void KillTracked(uint32_t seq) {
  for (Tracked& t : tracked) {
    if (t.process.pid == 0 || t.seq != seq) continue;
    Process now;
    if (ReadProcess(t.process.pid, &now) && now.start == t.process.start) {
      ::kill(t.process.pid, SIGKILL);
    }
    t = {};
  }
}

// The command's side of the clone: the last steps, then execve. Never returns.
int BecomeCommand(void* arg) {
  const CommandStart& c = *static_cast<const CommandStart*>(arg);
  if (::setsid() < 0) Fail("new session (setsid)", errno, 125);
  // What it starts and orphans stays in its tree (see Running); kept across execve.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) Fail("become a child subreaper", errno, 125);
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
                  const ReaperRequest& req, size_t strings_len, int fds[5]) {
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
  slot->signaled = false;
  // Held until the supervisor has its Exited event (reaper.h); not closed with the others.
  slot->out_r = fds[3];
  slot->err_r = fds[4];
  fds[3] = fds[4] = -1;
  // A failed start still ends with an Exited event (126/127 after execve, 125 before).
  SendStarted(sync_fd, req.seq, static_cast<pid_t>(pid), start_failure.error, start_failure.step);
}

void SignalCommand(const ReaperRequest& req) {
  if (req.signal <= 0 || req.signal >= NSIG) return;
  for (Running& r : running) {
    if (r.pid == 0 || r.seq != req.seq) continue;
    r.signaled = true;
    if (req.signal == SIGKILL) {
      // Stopped first, round after round until no new process appears, so that nothing forks
      // or is reparented out of the tree while it is being killed.
      size_t stopped = 0;
      for (int round = 0; round < 16; ++round) {
        ScanProcesses();
        size_t n = Descendants(r.pid);
        ::kill(r.pid, SIGSTOP);
        for (size_t i = 0; i < n; ++i) {
          ::kill(tree[i].pid, SIGSTOP);
          Track(r.seq, tree[i]);
        }
        if (n == stopped) break;
        stopped = n;
      }
      for (Tracked& t : tracked) {
        if (t.process.pid != 0 && t.seq == r.seq) ::kill(t.process.pid, SIGKILL);
      }
      ::kill(-r.pid, SIGKILL);
      ::kill(r.pid, SIGKILL);
      return;
    }
    // The tree first: once the signal ends the command, what it started is reparented to init
    // and no longer found under it.
    ScanProcesses();
    size_t n = Descendants(r.pid);
    for (size_t i = 0; i < n; ++i) Track(r.seq, tree[i]);
    // Its process group (setsid made it the leader); the command itself if it left the group
    // and nobody is left in it. Never both: a handler would run twice.
    if (::kill(-r.pid, req.signal) != 0) ::kill(r.pid, req.signal);
    // Then the members of its tree that left the group (their own setsid or setpgid). Those
    // that ignore the signal (a shell's background jobs ignore SIGINT) are killed when the
    // command exits, or by the SIGKILL after the grace.
    for (size_t i = 0; i < n; ++i) {
      if (::getpgid(tree[i].pid) != r.pid) ::kill(tree[i].pid, req.signal);
    }
    return;
  }
}

void CloseIfOpen(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
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
        if (r.signaled) KillTracked(r.seq);
        // With a grace, an exit the departed supervisor could not receive waits for the next.
        if (connected && (Send(sync_fd, event) || r.out_r < 0)) {
          CloseIfOpen(r.out_r);
          CloseIfOpen(r.err_r);
        } else {
          for (Pending& p : pending) {
            if (p.pid != 0) continue;
            p = {r.seq, pid, status, r.out_r, r.err_r};
            break;
          }
        }
        r.out_r = r.err_r = -1;
        break;
      }
    }
  }
}

void CloseReceived(const int fds[5]) {
  for (int i = 0; i < 5; ++i) {
    if (fds[i] >= 0) ::close(fds[i]);
  }
}

// One AdoptCommand event with the command's two read ends (those that are open).
void SendAdoptCommand(int sync_fd, uint32_t seq, pid_t pid, bool exited, int status, int out_r,
                      int err_r) {
  ReaperEvent event = {};
  event.op = ReaperOp::kAdoptCommand;
  event.seq = seq;
  event.pid = pid;
  event.status = status;
  event.step[0] = exited ? 'x' : 'r';
  int fds[2] = {out_r, err_r};
  const int n = (out_r >= 0 && err_r >= 0) ? 2 : 0;
  struct iovec iov = {&event, sizeof(event)};
  alignas(struct cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (n > 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
  }
  while (::sendmsg(sync_fd, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

// The supervisor is gone: a new socket pair, the supervisor's end left at kReaperSyncFd for the
// next one to take. Returns init's end (or exits if there is none to be had).
int Disconnect(int sync_fd) {
  if (sync_fd != kReaperSyncFd) ::close(sync_fd);
  ::close(kReaperSyncFd);  // kept as a copy of init's end while connected: the slot stays ours
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) ::_exit(0);
  const int mine = ::fcntl(sv[0], F_DUPFD_CLOEXEC, kReaperSyncFd + 1);
  ::close(sv[0]);
  if (mine < 0) ::_exit(0);
  if (sv[1] != kReaperSyncFd) {
    if (::dup3(sv[1], kReaperSyncFd, O_CLOEXEC) < 0) ::_exit(0);
    ::close(sv[1]);
  }
  connected = false;
  return mine;
}

// A new supervisor sent Adopt: every command it must know, then AdoptDone.
void Adopt(int sync_fd) {
  // Its copy of the supervisor's end is the supervisor's now; the slot keeps a copy of ours, so
  // that a later EOF is seen only when the supervisor's goes.
  ::dup3(sync_fd, kReaperSyncFd, O_CLOEXEC);
  connected = true;
  for (Running& r : running) {
    if (r.pid != 0) SendAdoptCommand(sync_fd, r.seq, r.pid, false, 0, r.out_r, r.err_r);
  }
  for (Pending& p : pending) {
    if (p.pid == 0) continue;
    SendAdoptCommand(sync_fd, p.seq, p.pid, true, p.status, p.out_r, p.err_r);
    CloseIfOpen(p.out_r);
    CloseIfOpen(p.err_r);
    p.pid = 0;
  }
  ReaperEvent done = {};
  done.op = ReaperOp::kAdoptDone;
  Send(sync_fd, done);
}

int64_t MonotonicMs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

void RunReaper(int sync_fd, const RlimitSetting* rlimits, size_t n_rlimits,
               uint32_t restart_grace_ms) {
  // Keep nothing but the socket: the setup's descriptors (pipes of the start handshake) must not
  // reach commands, and are closed on exec anyway.
  ::close_range(0, sync_fd - 1, 0);
  ::close_range(sync_fd + 1, ~0U, 0);
  for (Running& r : running) r.out_r = r.err_r = -1;
  int64_t give_up_ms = 0;  // while disconnected: when the grace ends
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) ::_exit(125);

  for (;;) {
    struct pollfd pfds[2] = {{sync_fd, POLLIN, 0}, {sigfd, POLLIN, 0}};
    int timeout = -1;
    if (!connected) {
      const int64_t left = give_up_ms - MonotonicMs();
      if (left <= 0) ::_exit(0);  // nobody took the sandbox over: end it
      timeout = static_cast<int>(left);
    }
    if (::poll(pfds, 2, timeout) < 0) {
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
    alignas(struct cmsghdr) char control[CMSG_SPACE(5 * sizeof(int))] = {};
    struct msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(sync_fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (restart_grace_ms == 0) ::_exit(0);  // the supervisor is gone: end the sandbox
      sync_fd = Disconnect(sync_fd);
      give_up_ms = MonotonicMs() + restart_grace_ms;
      continue;
    }
    int fds[5] = {-1, -1, -1, -1, -1};
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      if (c->cmsg_len == CMSG_LEN(3 * sizeof(int))) {
        std::memcpy(fds, CMSG_DATA(c), 3 * sizeof(int));
      } else if (c->cmsg_len == CMSG_LEN(5 * sizeof(int))) {
        std::memcpy(fds, CMSG_DATA(c), 5 * sizeof(int));
      }
    }
    if (!connected) {
      CloseReceived(fds);
      if (static_cast<size_t>(n) >= sizeof(ReaperOp) && req.op == ReaperOp::kAdopt) {
        Adopt(sync_fd);
      }
      continue;
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
