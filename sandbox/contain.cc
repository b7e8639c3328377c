#include "sandbox/contain.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "sandbox/caps.h"
#include "sandbox/child_exec.h"
#include "sandbox/netns/net.h"
#include "sandbox/reaper.h"
#include "sandbox/seccomp/seccomp_filter.h"
#include "util/child_failure.h"
#include "util/fd_passing.h"

namespace moat::sandbox {
namespace {

// Waits for one byte from the supervisor. EOF or anything unexpected means the supervisor gave
// up (or died): stop quietly; it reports the reason.
void AwaitSupervisor(int sync_fd, char expected) {
  char c = 0;
  ssize_t n;
  do {
    n = ::recv(sync_fd, &c, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n != 1 || c != expected) ::_exit(125);
}

// Closes every descriptor but those in `keep`. The clone copied the supervisor's whole table; in
// a daemon that includes other sandboxes' pipes, which must not be held open here. Allocation-
// free: `keep` is sorted in place.
void CloseAllExcept(int* keep, int n) {
  for (int i = 1; i < n; ++i) {  // insertion sort
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) std::swap(keep[j - 1], keep[j]);
  }
  unsigned int from = 0;
  for (int i = 0; i < n; ++i) {
    if (keep[i] < 0) continue;
    if (static_cast<unsigned int>(keep[i]) > from) ::close_range(from, keep[i] - 1, 0);
    from = keep[i] + 1;
  }
  ::close_range(from, ~0U, 0);
}

// Installs the plan's seccomp filter in this process and hands its listener (if the filter
// notifies) to the supervisor over the sync socket. Exits 125 with a report if either fails.
void InstallSeccompOrExit(const ContainPlan& p, int err) {
  int listener = InstallSeccompProgram(p.seccomp, p.seccomp_listener);
  if (listener < 0) {
    ReportChildFailure(err, "seccomp: install the filter", nullptr, -listener,
                       StepNeeds::kSeccompNotify);
    ::_exit(125);
  }
  if (p.seccomp_listener) {
    if (!SendFd(p.sync_fd, listener, kListenerTag)) {
      ReportChildFailure(err, "seccomp: hand the listener to the supervisor", nullptr, errno,
                         StepNeeds::kSeccompNotify);
      ::_exit(125);
    }
    ::close(listener);
  }
}

// Makes the plan's sockets in this (the sandbox's) network namespace, sends them to the
// supervisor in one message and closes them here: nothing of them stays for the command. Exits
// 125 with a report if any step fails.
void SendSocketsOrExit(const ContainPlan& p, int err) {
  constexpr char kStep[] = "egress: make a listener in the sandbox's network namespace";
  const int n = static_cast<int>(p.sockets.size());
  if (n > kMaxPassedFds) {
    ReportChildFailure(err, kStep, "more sockets than one message carries", E2BIG);
    ::_exit(125);
  }
  int fds[kMaxPassedFds];
  for (int i = 0; i < n; ++i) {
    const ChildSocket& s = p.sockets[i];
    fds[i] = ::socket(AF_INET, s.type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(s.port);
    sa.sin_addr.s_addr = htonl(s.ipv4);
    const int one = 1;
    if (fds[i] < 0 || ::setsockopt(fds[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        ::bind(fds[i], reinterpret_cast<const struct sockaddr*>(&sa), sizeof(sa)) != 0 ||
        (s.type == SOCK_STREAM && ::listen(fds[i], 128) != 0)) {
      ReportChildFailure(err, kStep, s.label.c_str(), errno);
      ::_exit(125);
    }
  }
  if (n > 0 && !SendFds(p.sync_fd, fds, n, kSocketsTag)) {
    ReportChildFailure(err, "egress: hand the listeners to the supervisor", nullptr, errno);
    ::_exit(125);
  }
  for (int i = 0; i < n; ++i) ::close(fds[i]);
}

// Replaces init's image (a copy of the whole supervisor) with the small moat-init program, its
// socket on kReaperSyncFd. Returns if that fails; init then serves in place.
void ExecInit(const ContainPlan& p) {
  int exec_fd = p.reaper_exec_fd;
  if (exec_fd == kReaperSyncFd) exec_fd = ::fcntl(exec_fd, F_DUPFD_CLOEXEC, kReaperSyncFd + 1);
  if (exec_fd < 0) return;
  if (p.sync_fd == kReaperSyncFd) {
    if (::fcntl(kReaperSyncFd, F_SETFD, 0) != 0) return;
  } else if (::dup2(p.sync_fd, kReaperSyncFd) != kReaperSyncFd) {  // dup2 clears CLOEXEC
    return;
  }
  char* const no_env[] = {nullptr};
  ::syscall(SYS_execveat, exec_fd, "", p.reaper_argv.data(), no_env, AT_EMPTY_PATH);
  if (p.sync_fd != kReaperSyncFd) ::close(kReaperSyncFd);
}

// The command: the last steps, then execve. Never returns.
[[noreturn]] void RunCommand(const ContainPlan& p) {
  const int err = p.error_fd;
  if (p.trace) p.trace->Stamp(ChildTrace::kCommandCloned);
  // A new session: no controlling terminal, so TIOCSTI has no terminal to inject into.
  if (::setsid() < 0) ReportChildFailure(err, "new session (setsid)", nullptr, errno), ::_exit(125);
  ResetSignals();
  if (::dup2(p.stdin_fd, 0) < 0 || ::dup2(p.stdout_fd, 1) < 0 || ::dup2(p.stderr_fd, 2) < 0) {
    ReportChildFailure(err, "connect standard input and output", nullptr, errno);
    ::_exit(125);
  }
  if (!ApplyRlimits(p.rlimits, err)) ::_exit(125);
  // Nothing but 0, 1 and 2 crosses execve.
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    ReportChildFailure(err, "mark descriptors close-on-exec (close_range)", nullptr, errno);
    ::_exit(125);
  }
  // Seccomp last: from here on only the filter's allowlist works (sendmsg, close, execve are on
  // it).
  InstallSeccompOrExit(p, err);
  if (p.trace) p.trace->Stamp(ChildTrace::kSeccompOn);
  ExecSearchingPath(p.argv[0], p.argv.data(), p.envp.data(), p.search_path.c_str());
  int e = errno;
  ReportChildFailure(err, "execve", p.argv[0], e);
  ::_exit(e == ENOENT ? 127 : 126);
}

// The command's stack: sharing init's memory (CLONE_VM), it must not run on init's stack.
alignas(64) char command_stack[64 * 1024];

int CommandMain(void* plan) { RunCommand(*static_cast<const ContainPlan*>(plan)); }

}  // namespace

void ContainPlan::Finalize() {
  argv.clear();
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  envp.clear();
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  reaper_argv.clear();
  for (std::string& a : reaper_argv_storage) reaper_argv.push_back(a.data());
  reaper_argv.push_back(nullptr);
}

void ContainAndRun(const ContainPlan& p) {
  const int err = p.error_fd;
  // If the supervisor dies, so does the sandbox (and with init, the whole pid namespace).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  {
    int keep[MountPlan::kMaxTrees + 6] = {p.stdin_fd, p.stdout_fd, p.stderr_fd,
                                          p.sync_fd,  err,         p.reaper_exec_fd};
    int n = 6;
    for (int fd : p.mounts->inherited_fds()) keep[n++] = fd;
    CloseAllExcept(keep, n);
  }

  // 1. user: root of the namespace, mapped to an unprivileged host id.
  AwaitSupervisor(p.sync_fd, kSyncIdsMapped);
  if (p.trace) p.trace->Stamp(ChildTrace::kIdsMapped);
  if (!BecomeNamespaceRoot(p.ids.privileged, err)) ::_exit(125);
  // Changing credentials clears the parent-death signal: arm it again. If the supervisor died
  // in between, the wait for 'C' below sees EOF and we exit.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // 2. net: only loopback.
  if (!p.loopback_ready && !BringUpLoopback(err)) ::_exit(125);
  SendSocketsOrExit(p, err);
  // 3. uts.
  if (::sethostname(p.hostname.data(), p.hostname.size()) != 0 ||
      ::setdomainname(p.hostname.data(), p.hostname.size()) != 0) {
    ReportChildFailure(err, "uts: set host name", nullptr, errno);
    ::_exit(125);
  }
  // 4. mount: the file system view, then pivot_root.
  if (!p.mounts->Execute(err)) ::_exit(125);
  if (p.trace) p.trace->Stamp(ChildTrace::kMountsDone);
  // 5. cgroup: the supervisor has moved us into the sandbox's cgroup; make it our root.
  AwaitSupervisor(p.sync_fd, kSyncInCgroup);
  if (::unshare(CLONE_NEWCGROUP) != 0) {
    ReportChildFailure(err, "cgroup namespace (unshare)", nullptr, errno);
    ::_exit(125);
  }
  if (p.trace) p.trace->Stamp(ChildTrace::kCgroupEntered);
  // 6. privileges: none, for init and (inherited) for the command.
  if (!DropAllCapabilities(p.last_cap, err)) ::_exit(125);
  // Init must not be traced or inspected by the command, which runs as the same uid.
  ::prctl(PR_SET_DUMPABLE, 0);
  if (p.trace) p.trace->Stamp(ChildTrace::kPrivilegesDropped);

  if (p.reaper) {
    // A long-lived sandbox: init stays and starts commands on request (reaper.h). What ends it
    // is the supervisor's end of the sync socket closing, not the death of whichever supervisor
    // thread happened to clone it.
    ::prctl(PR_SET_PDEATHSIG, 0);
    // One filter for init and, inherited, for every command: installed once, not per command.
    InstallSeccompOrExit(p, err);
    // EOF on the error pipe tells the supervisor the sandbox is ready: a successful exec closes
    // it (close-on-exec), so its init is already moat-init by then; else it is closed here.
    if (p.reaper_exec_fd >= 0) ExecInit(p);  // returns only if the exec failed
    ::close(err);
    RunReaper(p.sync_fd, p.rlimits.data(), p.rlimits.size());
  }

  // 7. the command, as pid 2. A vfork-style clone: it shares init's memory until its execve
  // (no copy of init's page tables, which are a copy of the whole supervisor's, and nothing for
  // the execve to tear down: measured here, the command starts ~0.14 ms sooner than after a
  // fork), and init sleeps until then. Not glibc's fork(), which would run atfork handlers and
  // take locks that another thread of the supervisor may have held when we were cloned.
  const int pid = ::clone(CommandMain, command_stack + sizeof(command_stack),
                          CLONE_VM | CLONE_VFORK | SIGCHLD, const_cast<ContainPlan*>(&p));
  if (pid < 0) {
    ReportChildFailure(err, "start the command (clone)", nullptr, errno);
    ::_exit(125);
  }

  // Init (awake once the command has exec'd or died): keep nothing the command could use, wait
  // for it, report, and exit. The kernel then kills every process left in the pid namespace
  // (background and setsid children included).
  int keep_sync[1] = {p.sync_fd};
  CloseAllExcept(keep_sync, 1);
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(-1, &status, 0);
    if (r == pid) {
      if (p.trace) p.trace->Stamp(ChildTrace::kCommandExited);
      ::send(p.sync_fd, &status, sizeof(status), MSG_NOSIGNAL);
      ::_exit(0);
    }
    if (r < 0 && errno != EINTR) ::_exit(125);
  }
}

}  // namespace moat::sandbox
