#include "node-agent/backend/kernel_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "node-agent/backend/freezer.h"
#include "node-agent/backend/namespace_ref.h"
#include "node-agent/config/config.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "sandbox/cgroup/cgroup_watch.h"
#include "sandbox/egress/sandbox_egress.h"
#include "sandbox/isolation.h"
#include "sandbox/policy/policy.h"
#include "util/env.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace moat::agent {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// After a command exits, what its background children keep writing is not waited for: its pipes
// are drained up to this much, then closed.
constexpr size_t kFinalDrainBytes = 4 << 20;
constexpr absl::Duration kStartTimeout = absl::Seconds(10);

namespace cgroupfs = sandbox::cgroupfs;

ExecExit ExitFromStatus(int status) {
  ExecExit exit;
  if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
    exit.exit_code = 128 + exit.signal;
  }
  return exit;
}

absl::Status StartError(const sandbox::ReaperEvent& started, const std::string& cwd) {
  const std::string step = started.step;
  const int error = started.status;
  if (step == "change to the working directory") {
    return absl::InvalidArgumentError(
        absl::StrCat("working directory \"", cwd,
                     "\" cannot be entered in the sandbox: ", std::strerror(error)));
  }
  if (error == EAGAIN) {
    return absl::ResourceExhaustedError(absl::StrCat("the sandbox's process limit is reached (",
                                                     step, "); wait for commands to end"));
  }
  return absl::InternalError(
      absl::StrCat("the command could not be started: ", step, ": ", std::strerror(error)));
}

}  // namespace

struct KernelBackend::Command {
  uint32_t seq = 0;
  std::string id;
  std::string cwd;
  absl::Time begin;
  absl::Time deadline = absl::InfiniteFuture();  // the request's timeout
  absl::Time kill_at = absl::InfiniteFuture();   // an interrupt's grace
  // Guarded by the backend's mu_:
  bool started = false;
  bool start_failed = false;  // before execve: Exec reports it, no callback runs
  sandbox::ReaperEvent start_event = {};
  bool exited = false;
  int wait_status = 0;
  bool timed_out = false;
  bool interrupted = false;
  UniqueFd out, err;  // read ends, non-blocking; reset once drained
  uint64_t out_token = 0, err_token = 0;

  absl::Mutex cb_mu;  // held while a callback runs
  bool finished ABSL_GUARDED_BY(cb_mu) = false;
  ExecCallbacks callbacks ABSL_GUARDED_BY(cb_mu);
};

struct KernelBackend::Box {
  std::string id;
  SandboxSpec spec;
  sandbox::Limits limits;
  std::unique_ptr<sandbox::LiveSandbox> sandbox;
  UniqueFd root;  // O_PATH of the sandbox's root, /proc/<init>/root: files resolve inside it
  // Held until Destroy has checked nothing is left in it (namespace_ref.h says why).
  NamespaceRef mount_ns;
  int mounts = 0;               // mount entries of its namespace at start
  uint64_t oom_kills_seen = 0;  // guarded by mu_: the cgroup's OOM kills already attributed
  std::string record_path;
  uint64_t event_token = 0;  // guarded by mu_
  bool dead = false;         // guarded by mu_: init exited or destroy began
  std::map<uint32_t, std::shared_ptr<Command>> commands;  // guarded by mu_
  absl::Mutex io_mu;  // the loop reads events, Destroy closes the socket: not both at once
};

struct KernelBackend::Watch {
  std::shared_ptr<Box> box;          // init events of this sandbox, or
  std::shared_ptr<Command> command;  // this command's output
  bool is_stderr = false;
};

absl::StatusOr<std::unique_ptr<KernelBackend>> KernelBackend::Create(KernelBackendOptions options) {
  struct stat st;
  if (::stat(options.state_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("state directory \"", options.state_dir,
                     "\" does not exist; create it (mode 0700, owned by root)"));
  }
  const std::string records = absl::StrCat(options.state_dir, "/sandboxes");
  if (::mkdir(records.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("create \"", records, "\""));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<sandbox::SandboxFactory> factory,
                   sandbox::SandboxFactory::Create());
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return ErrnoStatus("create the backend's epoll set");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return ErrnoStatus("create the backend's eventfd");
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) return ErrnoStatus("open \"/dev/null\"");
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // token 0: the wake eventfd
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return ErrnoStatus("watch the backend's eventfd");
  }
  auto backend = std::unique_ptr<KernelBackend>(
      new KernelBackend(std::move(options), std::move(factory), std::move(epoll), std::move(wake),
                        std::move(dev_null)));
  backend->loop_ = std::thread([b = backend.get()] { b->Loop(); });
  return backend;
}

KernelBackend::KernelBackend(KernelBackendOptions options,
                             std::unique_ptr<sandbox::SandboxFactory> factory, UniqueFd epoll,
                             UniqueFd wake, UniqueFd dev_null)
    : options_(std::move(options)),
      factory_(std::move(factory)),
      host_(sandbox::CurrentHostContext()),
      epoll_(std::move(epoll)),
      wake_(std::move(wake)),
      dev_null_(std::move(dev_null)) {}

KernelBackend::~KernelBackend() {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, box] : boxes_) ids.push_back(id);
  }
  for (const std::string& id : ids) Destroy(id).IgnoreError();
  stop_ = true;
  Wake();
  if (loop_.joinable()) loop_.join();
}

void KernelBackend::Wake() {
  uint64_t one = 1;
  ssize_t unused = ::write(wake_.get(), &one, sizeof(one));
  (void)unused;
}

uint64_t KernelBackend::AddWatchLocked(int fd, Watch watch) {
  const uint64_t token = next_token_++;
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = token;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return 0;
  watches_[token] = std::make_shared<Watch>(std::move(watch));
  return token;
}

void KernelBackend::RemoveWatchLocked(uint64_t token, int fd) {
  if (token == 0) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  watches_.erase(token);
}

absl::StatusOr<std::shared_ptr<KernelBackend::Box>> KernelBackend::Find(
    absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = boxes_.find(id);
  if (it == boxes_.end()) return absl::NotFoundError(absl::StrCat("no sandbox \"", id, "\""));
  return it->second;
}

pid_t KernelBackend::InitPid(absl::string_view id) const {
  absl::StatusOr<std::shared_ptr<Box>> box = Find(id);
  return box.ok() ? (*box)->sandbox->pid() : -1;
}

absl::StatusOr<UniqueFd> KernelBackend::RootOf(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = boxes_.find(id);
  if (it == boxes_.end()) return absl::NotFoundError(absl::StrCat("no sandbox \"", id, "\""));
  // A copy: Destroy may close the sandbox's own while a file operation is under way.
  UniqueFd copy(::fcntl(it->second->root.get(), F_DUPFD_CLOEXEC, 0));
  if (!copy) return ErrnoStatus("duplicate the sandbox root's descriptor");
  return copy;
}

absl::StatusOr<CreatedSandbox> KernelBackend::Create(const SandboxSpec& spec) {
  const absl::Time begin = absl::Now();
  if (!IsValidSandboxId(spec.id)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid sandbox id \"", spec.id, "\""));
  }
  {
    absl::MutexLock lock(&mu_);
    if (boxes_.contains(spec.id)) {
      return absl::AlreadyExistsError(absl::StrCat("sandbox \"", spec.id, "\" exists"));
    }
  }
  ASSIGN_OR_RETURN(sandbox::Policy policy,
                   ParseAgentPolicy(spec.policy, absl::StrCat("policy of ", spec.id)));
  auto box = std::make_shared<Box>();
  box->id = spec.id;
  box->spec = spec;
  box->limits = policy.limits;
  if (spec.limits.cpus > 0) box->limits.cpus = spec.limits.cpus;
  if (spec.limits.memory_bytes > 0) box->limits.memory_bytes = spec.limits.memory_bytes;
  if (spec.limits.pids > 0) box->limits.pids = spec.limits.pids;
  if (spec.limits.workspace_bytes > 0) box->limits.tmpfs_bytes = spec.limits.workspace_bytes;

  sandbox::LiveSandboxOptions options;
  options.name = absl::StrCat(::getpid(), "-", spec.id);
  options.limits = box->limits;
  // What the agent keeps about every sandbox, and the egress audit log, are for it alone.
  ASSIGN_OR_RETURN(sandbox::Isolation isolation,
                   sandbox::IsolationFor(policy, {.host = host_,
                                                  .audit_log = options_.audit_log,
                                                  .private_paths = {options_.state_dir}}));
  options.mounts = std::move(isolation.mounts);
  options.mounts.root_dir = spec.root_dir.empty() ? "/" : spec.root_dir;
  options.mounts.tmpfs_bytes = box->limits.tmpfs_bytes;
  if (isolation.egress) {
    egress::EgressOptions& e = options.egress.emplace(*std::move(isolation.egress));
    e.sandbox_id = spec.id;
    if (options_.on_egress) {
      e.observer = [cb = options_.on_egress, id = spec.id](
                       bool allowed, const std::string& detail) { cb(id, allowed, detail); };
    }
  }
  ASSIGN_OR_RETURN(box->sandbox, factory_->Start(options));
  auto undo = absl::MakeCleanup([&] { box->sandbox->Destroy(); });

  const pid_t init = box->sandbox->pid();
  box->root.reset(
      ::open(absl::StrCat("/proc/", init, "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!box->root) return ErrnoStatus("open the sandbox's root from outside");
  ASSIGN_OR_RETURN(box->mount_ns, NamespaceRef::Of(init, "mnt"));
  if (absl::StatusOr<std::string> mountinfo =
          cgroupfs::ReadFile(absl::StrCat("/proc/", init, "/mountinfo"));
      mountinfo.ok()) {
    box->mounts = static_cast<int>(std::count(mountinfo->begin(), mountinfo->end(), '\n'));
  }
  box->record_path = absl::StrCat(options_.state_dir, "/sandboxes/", spec.id, ".json");
  {
    nlohmann::json record = {{"id", spec.id},
                             {"agent_pid", ::getpid()},
                             {"init_pid", init},
                             {"cgroups", box->sandbox->cgroup().paths()}};
    std::ofstream out(box->record_path, std::ios::trunc);
    out << record.dump() << "\n";
    if (!out) return absl::InternalError(absl::StrCat("write \"", box->record_path, "\""));
  }
  auto unrecord = absl::MakeCleanup([&] { ::unlink(box->record_path.c_str()); });
  if (options_.on_start) RETURN_IF_ERROR(options_.on_start(spec.id, *box->sandbox, box->limits));
  // From here a failure also stops what on_start started (the probe), before `undo` runs.
  auto unstart = absl::MakeCleanup([&] {
    if (options_.on_destroy) options_.on_destroy(spec.id);
  });
  {
    absl::MutexLock lock(&mu_);
    if (boxes_.contains(spec.id)) {
      return absl::AlreadyExistsError(absl::StrCat("sandbox \"", spec.id, "\" exists"));
    }
    box->event_token = AddWatchLocked(box->sandbox->event_fd(), Watch{.box = box});
    if (box->event_token == 0) return ErrnoStatus("watch the sandbox's init");
    boxes_[spec.id] = box;
  }
  std::move(undo).Cancel();
  std::move(unrecord).Cancel();
  std::move(unstart).Cancel();
  return CreatedSandbox{.path = StartPath::kCold, .start_duration = absl::Now() - begin};
}

absl::StatusOr<CleanupReport> KernelBackend::Destroy(absl::string_view id) {
  std::shared_ptr<Box> box;
  std::vector<std::shared_ptr<Command>> commands;
  {
    absl::MutexLock lock(&mu_);
    auto it = boxes_.find(id);
    if (it == boxes_.end()) return CleanupReport{};
    box = it->second;
    boxes_.erase(it);
    box->dead = true;
    RemoveWatchLocked(box->event_token, box->sandbox->event_fd());
    box->event_token = 0;
    for (const auto& [seq, command] : box->commands) commands.push_back(command);
  }
  // Its probe first, so that the sandbox's death is not reported as an event of its own.
  if (options_.on_destroy) options_.on_destroy(box->id);
  CleanupReport report;
  sandbox::LiveSandboxTeardown teardown;
  {
    absl::MutexLock io(&box->io_mu);
    teardown = box->sandbox->Destroy();
  }
  // Every process is dead: the pipes are at EOF, the commands end as killed.
  for (const std::shared_ptr<Command>& command : commands) {
    FinishCommand(box, command, "the sandbox was destroyed");
  }
  report.processes_killed = teardown.processes_killed;
  report.cgroups_removed = teardown.cgroup_removed ? 1 : 0;
  report.residue = teardown.residue;
  // The last reference to the sandbox's mount namespace (and so its /workspace and /tmp).
  {
    absl::MutexLock lock(&mu_);
    box->root.reset();
  }
  std::vector<pid_t> left = box->mount_ns.Members();
  box->mount_ns.Release();  // Checked: now the kernel may free it, and reuse its number.
  if (left.empty()) {
    report.mounts_unmounted = box->mounts;
    report.workspaces_removed = 1;
  } else {
    report.residue.push_back(
        absl::StrCat("mount namespace of sandbox ", box->id, " still used by pid ", left.front()));
  }
  if (::unlink(box->record_path.c_str()) != 0 && errno != ENOENT) {
    report.residue.push_back(absl::StrCat("record \"", box->record_path, "\" not removed"));
  }
  return report;
}

absl::StatusOr<std::string> KernelBackend::Exec(absl::string_view id, const ExecRequest& request,
                                                ExecCallbacks callbacks) {
  if (request.command.find_first_not_of(" \t\r\n") == std::string::npos) {
    return absl::InvalidArgumentError("empty command; give a shell command to run");
  }
  const std::string cwd = request.cwd.empty() ? "/workspace" : request.cwd;
  if (cwd[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("cwd \"", cwd, "\" is not absolute; give an absolute path"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Box> box, Find(id));
  // The environment: the sandbox's (PATH, HOME, proxy variables), then the request's.
  std::vector<std::pair<std::string, std::string>> merged = box->sandbox->base_env();
  OverrideEnv(&merged, request.env);
  std::vector<std::string> env;
  for (const auto& [name, value] : merged) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("invalid variable name \"", name, "\""));
    }
    env.push_back(absl::StrCat(name, "=", value));
  }

  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus("create the command's stdout pipe");
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return ErrnoStatus("create the command's stderr pipe");
  UniqueFd err_r(err[0]), err_w(err[1]);
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);

  auto command = std::make_shared<Command>();
  command->cwd = cwd;
  command->begin = absl::Now();
  if (request.timeout != absl::InfiniteDuration()) {
    command->deadline = command->begin + request.timeout;
  }
  {
    absl::MutexLock cb(&command->cb_mu);
    command->callbacks = std::move(callbacks);
  }
  {
    absl::MutexLock lock(&mu_);
    if (box->dead) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " has ended"));
    command->seq = next_seq_++;
    command->id = absl::StrCat("cmd-", command->seq);
    command->out = std::move(out_r);
    command->err = std::move(err_r);
    command->out_token = AddWatchLocked(command->out.get(), Watch{.command = command});
    command->err_token =
        AddWatchLocked(command->err.get(), Watch{.command = command, .is_stderr = true});
    box->commands[command->seq] = command;
  }
  absl::Status sent = box->sandbox->SendExec(command->seq, cwd, {"/bin/sh", "-c", request.command},
                                             env, dev_null_.get(), out_w.get(), err_w.get());
  out_w.reset();
  err_w.reset();
  absl::MutexLock lock(&mu_);
  auto forget = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    RemoveWatchLocked(command->out_token, command->out.get());
    RemoveWatchLocked(command->err_token, command->err.get());
    box->commands.erase(command->seq);
    absl::MutexLock cb(&command->cb_mu);
    command->finished = true;  // no callback of a command that did not start
  };
  if (!sent.ok()) {
    forget();
    return sent;
  }
  Wake();  // its deadline counts now
  const absl::Time give_up = absl::Now() + kStartTimeout;
  while (!command->started && !box->dead) {
    if (started_cv_.WaitWithDeadline(&mu_, give_up)) break;
  }
  if (!command->started) {
    forget();
    return box->dead ? absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " has ended"))
                     : absl::DeadlineExceededError("the sandbox did not start the command in time");
  }
  const sandbox::ReaperEvent& started = command->start_event;
  if (command->start_failed) {
    // Exited (if it comes) finds the command finished and only cleans up.
    absl::Status error = StartError(started, cwd);
    forget();
    return error;
  }
  return command->id;
}

absl::Status KernelBackend::Interrupt(absl::string_view id, absl::string_view command_id,
                                      absl::Duration grace) {
  ASSIGN_OR_RETURN(std::shared_ptr<Box> box, Find(id));
  std::shared_ptr<Command> command;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [seq, c] : box->commands) {
      if (c->id == command_id) command = c;
    }
    if (command == nullptr) {
      // Ids are "cmd-<seq>" with seq below the next one: an earlier command that has ended.
      uint32_t seq = 0;
      if (absl::ConsumePrefix(&command_id, "cmd-") && absl::SimpleAtoi(command_id, &seq) &&
          seq > 0 && seq < next_seq_) {
        return absl::OkStatus();
      }
      return absl::NotFoundError(absl::StrCat("no command \"", command_id, "\" in ", id));
    }
    command->interrupted = true;
    command->kill_at = std::min(command->kill_at, absl::Now() + grace);
  }
  RETURN_IF_ERROR(box->sandbox->SendSignal(command->seq, SIGINT));
  Wake();
  return absl::OkStatus();
}

void KernelBackend::Loop() {
  struct epoll_event events[64];
  absl::Duration wait = absl::InfiniteDuration();
  // Deadlines are scanned (every command of every sandbox) only when one may have passed or
  // when Exec or Interrupt set a new one (they Wake the loop), not after every burst of output.
  absl::Time next_check = absl::InfiniteFuture();
  while (!stop_) {
    bool woken = false;
    const int ms = wait == absl::InfiniteDuration()
                       ? -1
                       : static_cast<int>(absl::ToInt64Milliseconds(wait) + 1);
    const int n = ::epoll_wait(epoll_.get(), events, 64, ms);
    for (int i = 0; i < n; ++i) {
      const uint64_t token = events[i].data.u64;
      if (token == 0) {
        uint64_t count;
        ssize_t unused = ::read(wake_.get(), &count, sizeof(count));
        (void)unused;
        woken = true;
        continue;
      }
      std::shared_ptr<Watch> watch;
      {
        absl::MutexLock lock(&mu_);
        auto it = watches_.find(token);
        if (it == watches_.end()) continue;  // removed since epoll_wait returned
        watch = it->second;
      }
      if (watch->box) {
        HandleInitEvents(watch->box);
      } else {
        HandleOutput(watch->command, watch->is_stderr);
      }
    }
    const absl::Time now = absl::Now();
    if (woken || now >= next_check) {
      wait = EnforceDeadlines();
      next_check = wait == absl::InfiniteDuration() ? absl::InfiniteFuture() : now + wait;
    } else {
      wait = next_check - now;
    }
  }
}

void KernelBackend::HandleInitEvents(const std::shared_ptr<Box>& box) {
  for (;;) {
    absl::StatusOr<std::optional<sandbox::ReaperEvent>> event;
    {
      absl::MutexLock io(&box->io_mu);
      {
        absl::MutexLock lock(&mu_);
        if (box->event_token == 0) return;  // Destroy took over
      }
      event = box->sandbox->ReadEvent();
    }
    if (!event.ok()) {
      // Init is gone by itself (OOM killer, a kill from the host): every command ends with it.
      std::vector<std::shared_ptr<Command>> commands;
      {
        absl::MutexLock lock(&mu_);
        box->dead = true;
        RemoveWatchLocked(box->event_token, box->sandbox->event_fd());
        box->event_token = 0;
        for (const auto& [seq, command] : box->commands) commands.push_back(command);
        started_cv_.SignalAll();
      }
      LogWarning(absl::StrCat("sandbox ", box->id, ": its init exited; its commands end"));
      for (const auto& command : commands) FinishCommand(box, command, "the sandbox ended");
      return;
    }
    if (!event->has_value()) return;
    const sandbox::ReaperEvent& e = **event;
    std::shared_ptr<Command> command;
    {
      absl::MutexLock lock(&mu_);
      auto it = box->commands.find(e.seq);
      if (it == box->commands.end()) continue;  // a command that failed to start, forgotten
      command = it->second;
      if (e.op == sandbox::ReaperOp::kStarted) {
        command->started = true;
        command->start_event = e;
        command->start_failed = e.status != 0 && std::strcmp(e.step, "execve") != 0;
        started_cv_.SignalAll();
        continue;
      }
      command->exited = true;
      command->wait_status = e.status;
    }
    FinishCommand(box, command, "");
  }
}

void KernelBackend::HandleOutput(const std::shared_ptr<Command>& command, bool is_stderr) {
  char buf[kReadChunk];
  ssize_t n;
  {
    absl::MutexLock lock(&mu_);
    UniqueFd& fd = is_stderr ? command->err : command->out;
    if (!fd) return;
    do {
      n = ::read(fd.get(), buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // EOF (or an error): this stream is done
      RemoveWatchLocked(is_stderr ? command->err_token : command->out_token, fd.get());
      (is_stderr ? command->err_token : command->out_token) = 0;
      fd.reset();
      return;
    }
  }
  absl::MutexLock cb(&command->cb_mu);
  if (command->finished) return;
  auto& sink = is_stderr ? command->callbacks.on_stderr : command->callbacks.on_stdout;
  if (sink) sink(absl::string_view(buf, static_cast<size_t>(n)));
}

void KernelBackend::FinishCommand(const std::shared_ptr<Box>& box,
                                  const std::shared_ptr<Command>& command,
                                  const std::string& error) {
  // Take the pipes out of the loop's hands, then drain them here.
  UniqueFd out, err;
  ExecExit exit;
  {
    absl::MutexLock lock(&mu_);
    RemoveWatchLocked(command->out_token, command->out.get());
    RemoveWatchLocked(command->err_token, command->err.get());
    command->out_token = command->err_token = 0;
    out = std::move(command->out);
    err = std::move(command->err);
    box->commands.erase(command->seq);
    if (command->start_failed) return;  // Exec returned the error; no callbacks
    if (command->exited) {
      exit = ExitFromStatus(command->wait_status);
    } else {
      exit.signal = SIGKILL;
      exit.exit_code = 128 + SIGKILL;
      exit.error = error;
    }
    exit.timed_out = command->timed_out;
    exit.interrupted = command->interrupted;
    if (command->start_event.status != 0) {
      exit.error =
          absl::StrCat("cannot execute the shell: ", std::strerror(command->start_event.status));
    }
  }
  exit.duration = absl::Now() - command->begin;
  if (exit.exit_code != 0 || exit.signal != 0) {
    // Only for failures: the cgroup is read off the warm path.
    absl::StatusOr<sandbox::CgroupUsage> usage = box->sandbox->cgroup().ReadUsage();
    absl::MutexLock lock(&mu_);
    if (usage.ok() && usage->oom_kills > box->oom_kills_seen) {
      exit.oom_killed = true;
      box->oom_kills_seen = usage->oom_kills;
    }
  }
  absl::MutexLock cb(&command->cb_mu);
  if (command->finished) return;
  command->finished = true;
  char buf[kReadChunk];
  for (int i = 0; i < 2; ++i) {
    UniqueFd& fd = i == 0 ? out : err;
    auto& sink = i == 0 ? command->callbacks.on_stdout : command->callbacks.on_stderr;
    size_t drained = 0;
    while (fd && drained < kFinalDrainBytes) {
      ssize_t n = ::read(fd.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
      if (sink) sink(absl::string_view(buf, static_cast<size_t>(n)));
    }
  }
  if (command->callbacks.on_exit) command->callbacks.on_exit(exit);
  command->callbacks = {};  // release what the callbacks hold
}

absl::Duration KernelBackend::EnforceDeadlines() {
  struct Kill {
    std::shared_ptr<Box> box;
    uint32_t seq;
  };
  std::vector<Kill> kills;
  absl::Time next = absl::InfiniteFuture();
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, box] : boxes_) {
      for (const auto& [seq, command] : box->commands) {
        if (command->exited) continue;
        if (command->deadline <= now && !command->timed_out) {
          command->timed_out = true;
          command->kill_at = now;
        }
        if (command->kill_at <= now) {
          kills.push_back({box, seq});
          command->kill_at = absl::InfiniteFuture();
        }
        if (!command->timed_out) next = std::min(next, command->deadline);
        next = std::min(next, command->kill_at);
      }
    }
  }
  for (const Kill& kill : kills) kill.box->sandbox->SendSignal(kill.seq, SIGKILL).IgnoreError();
  return next == absl::InfiniteFuture() ? absl::InfiniteDuration() : next - now;
}

absl::Status KernelBackend::Pause(absl::string_view id) {
  ASSIGN_OR_RETURN(std::shared_ptr<Box> box, Find(id));
  return SetFrozen(box->sandbox->cgroup().paths(), true);
}

absl::Status KernelBackend::Resume(absl::string_view id) {
  ASSIGN_OR_RETURN(std::shared_ptr<Box> box, Find(id));
  return SetFrozen(box->sandbox->cgroup().paths(), false);
}

absl::StatusOr<SandboxHealth> KernelBackend::Probe(absl::string_view id) {
  ASSIGN_OR_RETURN(std::shared_ptr<Box> box, Find(id));
  SandboxHealth health;
  {
    absl::MutexLock lock(&mu_);
    // Init's socket closes before it can be waited for: `dead` is the earlier sign.
    health.alive = !box->dead;
  }
  health.alive = health.alive && box->sandbox->Alive();
  health.last_heartbeat =
      options_.last_heartbeat ? options_.last_heartbeat(box->id) : absl::InfinitePast();
  if (absl::StatusOr<sandbox::CgroupSample> now =
          sandbox::ReadCgroupNow(box->sandbox->cgroup().paths());
      now.ok()) {
    health.processes = now->processes;
    health.memory_bytes = now->memory_bytes.value_or(0);
    if (now->cpu_ns) health.cpu_seconds = static_cast<double>(*now->cpu_ns) / 1e9;
  }
  return health;
}

absl::Status KernelBackend::CheckNode() {
  if (::access(options_.state_dir.c_str(), W_OK) != 0) {
    return absl::UnavailableError(absl::StrCat("state directory \"", options_.state_dir,
                                               "\" is not writable; check its owner and mode"));
  }
  absl::StatusOr<sandbox::CgroupPlan> plan = sandbox::PlanCgroup(factory_->cgroup_layout());
  if (!plan.ok()) return absl::UnavailableError(plan.status().message());
  return absl::OkStatus();
}

NodeUsage KernelBackend::Usage() {
  NodeUsage usage;
  usage.cpu_cores = static_cast<double>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  usage.memory_bytes = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                       static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
  if (absl::StatusOr<std::string> pid_max = cgroupfs::ReadFile("/proc/sys/kernel/pid_max");
      pid_max.ok()) {
    usage.pids_max = cgroupfs::ParseCount(*pid_max, "pid_max").value_or(0);
  }
  std::vector<std::shared_ptr<Box>> boxes;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, box] : boxes_) boxes.push_back(box);
  }
  for (const std::shared_ptr<Box>& box : boxes) {
    usage.cpu_cores_allocated += box->limits.cpus;
    if (absl::StatusOr<sandbox::CgroupSample> now =
            sandbox::ReadCgroupNow(box->sandbox->cgroup().paths());
        now.ok()) {
      usage.memory_bytes_used += now->memory_bytes.value_or(0);
      usage.pids_used += now->processes;
    }
  }
  return usage;
}

absl::StatusOr<CleanupReport> KernelBackend::CleanLeftovers() {
  CleanupReport report;
  const std::string dir = absl::StrCat(options_.state_dir, "/sandboxes");
  DIR* records = ::opendir(dir.c_str());
  if (records == nullptr) return ErrnoStatus(absl::StrCat("read \"", dir, "\""));
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(records)) {
    std::string name = e->d_name;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".json") names.push_back(name);
  }
  ::closedir(records);
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, "/", name);
    absl::StatusOr<std::string> text = cgroupfs::ReadFile(path);
    nlohmann::json record =
        nlohmann::json::parse(text.ok() ? *text : std::string(), nullptr, false);
    const std::string id = name.substr(0, name.size() - 5);
    {
      absl::MutexLock lock(&mu_);
      if (boxes_.contains(id)) continue;  // ours, alive
    }
    if (record.is_object() && record.value("agent_pid", 0) == ::getpid()) continue;
    // Its processes: whatever is still in its cgroups (init normally exited when the agent's
    // socket closed, taking its pid namespace along). Only the sandbox's own cgroups: a damaged
    // record must not name, say, a hierarchy's root.
    std::vector<std::string> dirs;
    if (record.is_object() && record.contains("cgroups") && record["cgroups"].is_array()) {
      for (const auto& cg : record["cgroups"]) {
        if (!cg.is_string()) continue;
        const std::string dir = cg.get<std::string>();
        if (absl::StrContains(dir, "/moat/") && absl::EndsWith(dir, absl::StrCat("-", id)) &&
            !absl::StrContains(dir, "..")) {
          dirs.push_back(dir);
        }
      }
    }
    if (!dirs.empty()) {
      absl::StatusOr<std::vector<pid_t>> pids = cgroupfs::ListProcesses(dirs.front());
      if (pids.ok() && !pids->empty()) {
        // Through pidfds, and only pids still listed there: a reused pid is never hit.
        absl::Status killed = cgroupfs::KillListed(*pids, dirs);
        if (killed.ok()) {
          report.processes_killed += static_cast<int>(pids->size());
        } else {
          report.residue.push_back(absl::StrCat("processes of ", id, ": ", killed.message()));
        }
      }
    }
    if (::unlink(path.c_str()) == 0) ++report.workspaces_removed;
  }
  // The cgroups of sandboxes whose agent is gone (named "<dead pid>-<id>").
  absl::StatusOr<std::vector<std::string>> removed =
      sandbox::CleanupStaleCgroups(factory_->cgroup_layout());
  if (!removed.ok()) {
    report.residue.push_back(absl::StrCat("stale cgroups: ", removed.status().message()));
  } else {
    report.cgroups_removed = static_cast<int>(removed->size());
  }
  return report;
}

}  // namespace moat::agent
