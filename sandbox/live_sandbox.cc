#include "sandbox/live_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sandbox/cgroup/cgroup_watch.h"
#include "sandbox/contain.h"
#include "sandbox/prepare.h"
#include "sandbox/rlimits.h"
#include "sandbox/spawn.h"
#include "util/env.h"
#include "util/errno_status.h"
#include "util/self_path.h"
#include "util/status_macros.h"

namespace moat::sandbox {

absl::StatusOr<std::unique_ptr<SandboxFactory>> SandboxFactory::Create(std::string init_binary) {
  // The v1 freezer is kept (when mounted): every process still dies with init (pid namespace),
  // but the agent pauses and resumes whole sandboxes with it (node-agent/backend/freezer.h).
  ASSIGN_OR_RETURN(std::unique_ptr<HostSetup> host, HostSetup::Detect({.keep_v1_freezer = true}));
  // Built now, not at the first sandbox: a broken filter stops the agent at start.
  ASSIGN_OR_RETURN(const SeccompProgram* seccomp, host->Seccomp(/*guard_creation=*/false));
  auto factory = std::unique_ptr<SandboxFactory>(new SandboxFactory(std::move(host), seccomp));
  std::vector<std::string> candidates;
  if (!init_binary.empty()) {
    candidates.push_back(init_binary);
  } else {
    candidates.push_back(BesideThisProgram("moat-init"));
#ifdef MOAT_INIT_BUILD_PATH
    candidates.push_back(MOAT_INIT_BUILD_PATH);
#endif
  }
  for (const std::string& path : candidates) {
    UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
    if (fd) {
      factory->init_path_ = path;
      factory->init_fd_ = std::move(fd);
      break;
    }
  }
  if (!init_binary.empty() && !factory->init_fd_) {
    return absl::NotFoundError(absl::StrCat("no moat-init program at \"", init_binary, "\""));
  }
  return factory;
}

absl::StatusOr<std::unique_ptr<LiveSandbox>> SandboxFactory::Start(
    const LiveSandboxOptions& options) {
  auto box = std::unique_ptr<LiveSandbox>(new LiveSandbox());
  box->arch_ = seccomp_->arch();
  const CgroupLimits limits{options.limits.memory_bytes, options.limits.pids, options.limits.cpus};
  RETURN_IF_ERROR(ValidateCgroupRequest(options.name, limits));
  ASSIGN_OR_RETURN(box->cgroup_, Cgroup::Create(host_->cgroup_layout(), options.name, limits));

  ASSIGN_OR_RETURN(std::unique_ptr<PreparedSandbox> prepared,
                   PrepareSandbox(*host_, {.mounts = &options.mounts,
                                           .cpu_timeout = options.limits.cpu_timeout,
                                           .egress = options.egress ? &*options.egress : nullptr,
                                           .seccomp = seccomp_}));
  box->egress_ = std::move(prepared->egress);
  box->base_env_ = std::move(prepared->env);
  ContainPlan& plan = prepared->plan;
  plan.reaper = true;
  if (init_fd_) {
    plan.reaper_exec_fd = init_fd_.get();
    plan.reaper_argv_storage = {"moat-init", absl::StrCat("--sync-fd=", kReaperSyncFd)};
    for (const RlimitSetting& r : plan.rlimits) {
      plan.reaper_argv_storage.push_back(
          absl::StrCat("--rlimit=", r.resource, ":", r.limit.rlim_cur, ":", r.limit.rlim_max));
    }
    if (options.restart_grace_ms > 0) {
      plan.reaper_argv_storage.push_back(
          absl::StrCat("--restart-grace-ms=", options.restart_grace_ms));
      box->restart_grace_ms_ = options.restart_grace_ms;
    }
  }
  plan.Finalize();

  SpawnOptions spawn;
  spawn.cgroup = box->cgroup_.get();
  if (box->egress_) {
    spawn.before_start = [&](int pidfd) { return box->egress_->Attach(pidfd); };
  }
  ASSIGN_OR_RETURN(SandboxProcess proc, SpawnSandbox(plan, spawn));
  box->pid_ = proc.pid;
  box->pidfd_ = std::move(proc.pidfd);
  box->sync_ = std::move(proc.sync);
  box->seccomp_listener_ = std::move(proc.seccomp_listener);
  // proc's stdio pipes were init's, which closed them: nothing flows there.
  return box;
}

LiveSandbox::~LiveSandbox() { Destroy(); }

absl::Status LiveSandbox::SendExec(uint32_t seq, const std::string& cwd,
                                   const std::vector<std::string>& argv,
                                   const std::vector<std::string>& env, int stdin_fd, int stdout_fd,
                                   int stderr_fd, int stdout_read_fd, int stderr_read_fd) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("no command given");
  if (cwd.empty() || cwd[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("working directory \"", cwd, "\" is not an absolute path"));
  }
  if (argv.size() + env.size() > kReaperMaxArgs) {
    return absl::InvalidArgumentError(
        absl::StrCat("too many arguments and variables (at most ", kReaperMaxArgs, ")"));
  }
  std::string strings;
  auto add = [&](const std::string& s) -> absl::Status {
    if (s.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("a command, argument or variable contains a NUL byte");
    }
    strings.append(s).push_back('\0');
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(add(cwd));
  for (const std::string& a : argv) RETURN_IF_ERROR(add(a));
  for (const std::string& e : env) RETURN_IF_ERROR(add(e));
  if (strings.size() > kReaperMaxStrings) {
    return absl::InvalidArgumentError(absl::StrCat("command, arguments and environment are ",
                                                   strings.size(), " bytes; at most ",
                                                   kReaperMaxStrings, " are accepted"));
  }
  ReaperRequest req = {};
  req.op = ReaperOp::kExec;
  req.seq = seq;
  req.argc = static_cast<uint32_t>(argv.size());
  req.envc = static_cast<uint32_t>(env.size());
  req.strings_len = static_cast<uint32_t>(strings.size());
  struct iovec iov[2] = {{&req, sizeof(req)}, {strings.data(), strings.size()}};
  const int fds[5] = {stdin_fd, stdout_fd, stderr_fd, stdout_read_fd, stderr_read_fd};
  const size_t n_fds =
      (restart_grace_ms_ > 0 && stdout_read_fd >= 0 && stderr_read_fd >= 0) ? 5 : 3;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(fds))] = {};
  struct msghdr msg = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), fds, n_fds * sizeof(int));
  ssize_t n;
  do {
    n = ::sendmsg(sync_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN) {
      return absl::ResourceExhaustedError(
          "the sandbox's init has too many requests waiting; retry shortly");
    }
    if (errno == EPIPE || errno == ECONNRESET) {
      return absl::FailedPreconditionError("the sandbox's init has exited");
    }
    return ErrnoStatus("send the command to the sandbox's init");
  }
  return absl::OkStatus();
}

absl::Status LiveSandbox::SendSignal(uint32_t seq, int signo) {
  ReaperRequest req = {};
  req.op = ReaperOp::kSignal;
  req.seq = seq;
  req.signal = signo;
  if (::send(sync_.get(), &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    if (errno == EPIPE || errno == ECONNRESET) {
      return absl::FailedPreconditionError("the sandbox's init has exited");
    }
    return ErrnoStatus("send a signal request to the sandbox's init");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ReaperEvent>> LiveSandbox::ReadEvent() {
  ReaperEvent event;
  ssize_t n;
  do {
    n = ::recv(sync_.get(), &event, sizeof(event), MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return std::optional<ReaperEvent>();
  if (n == 0 || (n < 0 && errno == ECONNRESET)) {
    return absl::FailedPreconditionError("the sandbox's init has exited");
  }
  if (n < 0) return ErrnoStatus("read an event from the sandbox's init");
  if (n != static_cast<ssize_t>(sizeof(event))) {
    return absl::InternalError("the sandbox's init sent a malformed event");
  }
  event.step[sizeof(event.step) - 1] = '\0';
  return std::optional<ReaperEvent>(event);
}

bool LiveSandbox::Alive() const {
  if (!pidfd_) return false;
  siginfo_t info = {};
  // WNOWAIT: look without reaping; Destroy reaps.
  if (::waitid(static_cast<idtype_t>(P_PIDFD), pidfd_.get(), &info, WEXITED | WNOHANG | WNOWAIT) !=
      0) {
    return false;
  }
  return info.si_pid == 0;
}

void LiveSandbox::Release() {
  absl::MutexLock lock(&destroy_mu_);
  if (destroyed_) return;
  destroyed_ = true;
  sync_.reset();
  seccomp_listener_.reset();
  pidfd_.reset();
  // The cgroup object would remove its directories when it goes: the sandbox still lives there.
  (void)cgroup_.release();
}

absl::StatusOr<std::unique_ptr<LiveSandbox>> LiveSandbox::Adopt(
    pid_t pid, UniqueFd pidfd, UniqueFd sync, std::unique_ptr<Cgroup> cgroup,
    UniqueFd seccomp_listener, uint32_t restart_grace_ms, absl::Duration timeout,
    std::vector<AdoptedCommand>* commands) {
  ReaperRequest req = {};
  req.op = ReaperOp::kAdopt;
  if (::send(sync.get(), &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the sandbox's init takes no new supervisor: ", std::strerror(errno)));
  }
  const absl::Time give_up = absl::Now() + timeout;
  commands->clear();
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(give_up - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("the sandbox's init did not answer Adopt");
    struct pollfd pfd = {sync.get(), POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(ms)) <= 0) continue;
    ReaperEvent event = {};
    struct iovec iov = {&event, sizeof(event)};
    alignas(struct cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(sync.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return absl::FailedPreconditionError("the sandbox's init closed its socket");
    int fds[2] = {-1, -1};
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(2 * sizeof(int))) {
        std::memcpy(fds, CMSG_DATA(c), sizeof(fds));
      }
    }
    UniqueFd out(fds[0]), err(fds[1]);
    if (n != static_cast<ssize_t>(sizeof(event))) {
      return absl::InternalError("the sandbox's init sent a malformed answer to Adopt");
    }
    if (event.op == ReaperOp::kAdoptDone) break;
    if (event.op != ReaperOp::kAdoptCommand) continue;
    AdoptedCommand command;
    command.seq = event.seq;
    command.pid = event.pid;
    command.exited = event.step[0] == 'x';
    command.wait_status = event.status;
    command.out = std::move(out);
    command.err = std::move(err);
    commands->push_back(std::move(command));
  }
  auto box = std::unique_ptr<LiveSandbox>(new LiveSandbox());
  box->pid_ = pid;
  box->pidfd_ = std::move(pidfd);
  box->sync_ = std::move(sync);
  box->seccomp_listener_ = std::move(seccomp_listener);
  box->cgroup_ = std::move(cgroup);
  box->base_env_ = DefaultSandboxEnv();
  box->restart_grace_ms_ = restart_grace_ms;
  return box;
}

absl::Status LiveSandbox::ResumeEgress(const egress::EgressOptions& options) {
  if (egress_) return absl::FailedPreconditionError("the sandbox's egress is served already");
  ASSIGN_OR_RETURN(std::unique_ptr<egress::EgressSession> session,
                   egress::EgressSession::Create(options));
  RETURN_IF_ERROR(session->Attach(pidfd_.get()));
  OverrideEnv(&base_env_, session->Env());
  egress_ = std::move(session);
  return absl::OkStatus();
}

LiveSandboxTeardown LiveSandbox::Destroy() {
  absl::MutexLock lock(&destroy_mu_);
  LiveSandboxTeardown teardown;
  if (destroyed_) return teardown;
  destroyed_ = true;
  if (cgroup_) {
    absl::StatusOr<CgroupSample> now = ReadCgroupNow(cgroup_->paths());
    teardown.processes_killed = now.ok() ? now->processes : 0;
  }
  if (pidfd_) {
    // Init's death ends the pid namespace: the kernel kills every process in it.
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    siginfo_t info;
    while (::waitid(static_cast<idtype_t>(P_PIDFD), pidfd_.get(), &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
  }
  sync_.reset();
  seccomp_listener_.reset();
  if (egress_) teardown.egress_denials = egress_->Finish();
  if (cgroup_) {
    std::vector<std::string> paths = cgroup_->paths();
    absl::Status removed = cgroup_->Destroy();
    teardown.cgroup_removed = removed.ok();
    if (!removed.ok()) {
      for (const std::string& path : paths) {
        if (::access(path.c_str(), F_OK) == 0) {
          teardown.residue.push_back(absl::StrCat("cgroup \"", path, "\": ", removed.message()));
        }
      }
    }
  }
  return teardown;
}

}  // namespace moat::sandbox
