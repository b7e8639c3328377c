#include "node-agent/backend/kernel_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "node-agent/backend/adopted_cgroup.h"
#include "node-agent/backend/direct_command.h"
#include "node-agent/backend/freezer.h"
#include "node-agent/backend/kept_cgroups.h"
#include "node-agent/backend/namespace_ref.h"
#include "node-agent/config/config.h"
#include "sandbox/cgroup/cgroup_detach.h"
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
// How often a command's cpu_timeout is checked: a run may pass it by up to this much CPU time
// per core of its quota.
constexpr absl::Duration kCpuPoll = absl::Milliseconds(20);
// How long a command with settle_reports waits, at most, for its sandbox's egress proxy to finish
// the connections it serves and for its probe's reports (they are normally there at once: the
// wait is for a thread that has not run yet, not for the sandbox).
constexpr absl::Duration kSettleTimeout = absl::Milliseconds(200);

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

// Start time of `pid` (field 22 of /proc/PID/stat, clock ticks since boot); 0 if it is gone.
// A pid with the recorded start time is the recorded process, not a reuse of its number.
uint64_t StartTimeOf(pid_t pid) {
  absl::StatusOr<std::string> text = cgroupfs::ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!text.ok()) return 0;
  const size_t paren = text->rfind(')');
  if (paren == std::string::npos) return 0;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*text).substr(paren + 2), ' ');
  uint64_t start = 0;  // fields[0] is field 3
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &start)) return 0;
  return start;
}

// A spool frame: one byte ('t' the tag, 'd' the deadline in Unix nanoseconds as text, 'o' stdout,
// 'e' stderr), the command's seq and the length (4 bytes each), the bytes. One append-only file
// per sandbox: no file per command.
constexpr size_t kFrameHeader = 9;
void WriteFrame(int fd, char type, uint32_t seq, absl::string_view data) {
  if (fd < 0) return;
  char header[kFrameHeader] = {type};
  const uint32_t n = static_cast<uint32_t>(data.size());
  std::memcpy(header + 1, &seq, sizeof(seq));
  std::memcpy(header + 5, &n, sizeof(n));
  struct iovec iov[2] = {{header, sizeof(header)}, {const_cast<char*>(data.data()), data.size()}};
  ssize_t unused = ::writev(fd, iov, 2);  // best effort: the live stream does not wait on it
  (void)unused;
}

// Calls `frame` for each complete frame of a spool file's text.
template <typename F>
void ReadFrames(absl::string_view text, F frame) {
  while (text.size() >= kFrameHeader) {
    uint32_t seq, n;
    std::memcpy(&seq, text.data() + 1, sizeof(seq));
    std::memcpy(&n, text.data() + 5, sizeof(n));
    if (text.size() - kFrameHeader < n) return;  // cut short by a crash: the rest is lost
    frame(text[0], seq, text.substr(kFrameHeader, n));
    text.remove_prefix(kFrameHeader + n);
  }
}

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// The cgroups a record names, only the sandbox's own ("<hierarchy>/moat/...-<id>"): a damaged
// record must not name, say, a hierarchy's root. `rejected`: the first other one, if any.
std::vector<std::string> RecordedCgroups(const nlohmann::json& record, const std::string& id,
                                         std::string* rejected) {
  std::vector<std::string> dirs;
  if (!record.is_object() || !record.contains("cgroups") || !record["cgroups"].is_array()) {
    return dirs;
  }
  for (const auto& cg : record["cgroups"]) {
    if (!cg.is_string()) continue;
    const std::string dir = cg.get<std::string>();
    if (absl::StrContains(dir, "/moat/") && absl::EndsWith(dir, absl::StrCat("-", id)) &&
        !absl::StrContains(dir, "..")) {
      dirs.push_back(dir);
    } else if (rejected->empty()) {
      *rejected = dir;
    }
  }
  return dirs;
}

}  // namespace

struct KernelBackend::Command {
  uint32_t seq = 0;
  std::string id;
  std::string cwd;
  absl::Time begin;
  absl::Time deadline = absl::InfiniteFuture();  // the request's timeout
  absl::Time kill_at = absl::InfiniteFuture();   // an interrupt's grace
  // The sandbox cgroup's CPU time when the command was sent (nullopt: unreadable), and the
  // most it may reach before the command is killed (the request's cpu_timeout; 0: none).
  std::optional<uint64_t> cpu_start_ns;
  uint64_t cpu_limit_ns = 0;
  bool settle_reports = false;  // ExecRequest::settle_reports
  bool direct = false;          // exec'd without the shell (direct_command.h)
  // Guarded by the backend's mu_:
  bool started = false;
  bool start_failed = false;  // before execve: Exec reports it, no callback runs
  sandbox::ReaperEvent start_event = {};
  bool exited = false;
  int wait_status = 0;
  bool timed_out = false;
  bool cpu_timed_out = false;
  bool interrupted = false;
  UniqueFd out, err;  // read ends, non-blocking; reset once drained
  uint64_t out_token = 0, err_token = 0;
  // Backpressure (ExecCallbacks::accepts_more): the pipes are out of the loop's interest while
  // held. `resumes` counts ResumeOutput calls, so that one that comes between the consumer's
  // "no more" and the hold is not lost (HandleOutput holds only if none came since its read).
  bool held = false;
  uint64_t resumes = 0;
  // With a restart grace: the sandbox's spool file (what was read so far), written by whoever
  // reads; shared with the box, so that Destroy closing it cannot leave a stale number here.
  std::shared_ptr<UniqueFd> spool;
  // Adopted: what the previous agent spooled, for Reattach.
  std::vector<std::pair<char, std::string>> spooled;
  bool attached = true;  // false: adopted, waiting for Reattach (its exit is kept until then)

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
  std::shared_ptr<UniqueFd> spool;  // with a restart grace: state_dir/spool/<id>
  uint64_t init_start = 0;          // init's start time (StartTimeOf)
  pid_t probe_pid = -1;
  uint64_t probe_start = 0;
  bool probe_listener = false;  // the probe holds the sandbox's seccomp listener
  uint64_t event_token = 0;     // guarded by mu_
  bool dead = false;            // guarded by mu_: init exited or destroy began
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
  for (const char* sub : {"/sandboxes", "/spool"}) {
    const std::string dir = absl::StrCat(options.state_dir, sub);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus(absl::StrCat("create \"", dir, "\""));
    }
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

void KernelBackend::SetHeldLocked(Command& command, bool held) {
  command.held = held;
  for (const auto& [fd, token] : {std::pair(command.out.get(), command.out_token),
                                  std::pair(command.err.get(), command.err_token)}) {
    if (token == 0 || fd < 0) continue;
    struct epoll_event ev = {};
    // EPOLLHUP comes either way (epoll_ctl(2)).
    ev.events = held ? 0u : static_cast<uint32_t>(EPOLLIN);
    ev.data.u64 = token;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
  }
}

void KernelBackend::ResumeOutput(absl::string_view id, absl::string_view command_id) {
  absl::StatusOr<std::shared_ptr<Box>> box = Find(id);
  if (!box.ok()) return;
  absl::MutexLock lock(&mu_);
  for (const auto& [seq, command] : (*box)->commands) {
    if (command->id != command_id) continue;
    ++command->resumes;
    if (command->held) SetHeldLocked(*command, false);
  }
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
    if (boxes_.contains(spec.id) || creating_.contains(spec.id)) {
      return absl::AlreadyExistsError(absl::StrCat("sandbox \"", spec.id, "\" exists"));
    }
    creating_.insert(spec.id);
  }
  auto created = absl::MakeCleanup([&] {
    absl::MutexLock lock(&mu_);
    creating_.erase(spec.id);
  });
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
                                                  .private_paths = PrivatePaths()}));
  options.mounts = std::move(isolation.mounts);
  options.mounts.root_dir = spec.root_dir.empty() ? "/" : spec.root_dir;
  options.mounts.tmpfs_bytes = box->limits.tmpfs_bytes;
  // A sandbox with egress outlives the agent too: its proxy lives in the agent, and the next one
  // serves it again from the policy kept in the record (AdoptOne); meanwhile nothing listens.
  if (options_.restart_grace > absl::ZeroDuration()) {
    options.restart_grace_ms =
        static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.restart_grace));
    // Not named after this agent's pid: once it is gone, any moat process's stale-cgroup
    // cleanup (CleanupStaleCgroups) would kill the sandbox during its grace. Its record finds
    // it instead (Adopt, CleanLeftovers).
    options.name = absl::StrCat("keep-", spec.id);
  }
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
  // To outlive the agent it must also outlive the agent's cgroups: a container runtime stopping
  // the agent's container kills what they list (cgroup_detach.h).
  if (box->sandbox->restart_grace_ms() > 0) {
    RETURN_IF_ERROR(sandbox::DetachFromCreator(factory_->cgroup_layout(), init,
                                               box->sandbox->cgroup().paths()));
  }
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
  box->init_start = StartTimeOf(init);
  RETURN_IF_ERROR(WriteRecord(*box));
  auto unrecord = absl::MakeCleanup([&] { ::unlink(box->record_path.c_str()); });
  box->probe_listener = box->sandbox->holds_seccomp_listener();  // on_start gives it to the probe
  if (options_.on_start) RETURN_IF_ERROR(options_.on_start(spec.id, *box->sandbox, box->limits));
  // From here a failure also stops what on_start started (the probe), before `undo` runs.
  auto unstart = absl::MakeCleanup([&] {
    if (options_.on_destroy) options_.on_destroy(spec.id);
  });
  if (box->sandbox->restart_grace_ms() > 0) {
    RETURN_IF_ERROR(RecordProbe(*box));
    const std::string spool = SpoolPath(spec.id);
    box->spool = std::make_shared<UniqueFd>(
        ::open(spool.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
    if (!*box->spool) return ErrnoStatus(absl::StrCat("create \"", spool, "\""));
    RETURN_IF_ERROR(WriteRecord(*box));
  }
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
  ::unlink(SpoolPath(box->id).c_str());
  // A kept sandbox ended: the cgroups kept sandboxes left that nothing names go too (not this
  // sandbox's residue: logged).
  if (box->sandbox->restart_grace_ms() > 0) {
    if (absl::StatusOr<int> swept = RemoveUnusedKeptCgroups(); !swept.ok()) {
      LogWarning(std::string(swept.status().message()));
    }
  }
  return report;
}

absl::StatusOr<int> KernelBackend::RemoveUnusedKeptCgroups() {
  const std::string records = absl::StrCat(options_.state_dir, "/sandboxes/");
  absl::StatusOr<std::vector<std::string>> removed =
      agent::RemoveUnusedKeptCgroups(factory_->cgroup_layout(), [&](absl::string_view id) {
        {
          absl::MutexLock lock(&mu_);
          if (boxes_.contains(id) || creating_.contains(id)) return true;
        }
        struct stat st;
        return ::stat(absl::StrCat(records, id, ".json").c_str(), &st) == 0 || errno != ENOENT;
      });
  if (!removed.ok()) return removed.status();
  if (!removed->empty()) {
    LogInfo(absl::StrCat("removed ", removed->size(),
                         " cgroup(s) of kept sandboxes that no record names"));
  }
  return static_cast<int>(removed->size());
}

absl::Status KernelBackend::RecordProbe(Box& box) {
  if (options_.probe_pid) box.probe_pid = options_.probe_pid(box.id);
  if (box.probe_pid <= 0) return absl::OkStatus();
  box.probe_start = StartTimeOf(box.probe_pid);
  // It holds the sandbox's seccomp listener for the next agent (AdoptOne): it outlives this
  // agent's cgroups as init does.
  absl::Status detached = sandbox::DetachFromCreator(factory_->cgroup_layout(), box.probe_pid, {});
  if (!detached.ok()) {
    return absl::Status(detached.code(),
                        absl::StrCat("the probe of ", box.id, ": ", detached.message()));
  }
  return absl::OkStatus();
}

std::string KernelBackend::SpoolPath(absl::string_view id) const {
  return absl::StrCat(options_.state_dir, "/spool/", id);
}

std::vector<std::string> KernelBackend::PrivatePaths() const {
  std::vector<std::string> paths = options_.private_paths;
  paths.push_back(options_.state_dir);
  return paths;
}

absl::Status KernelBackend::WriteRecord(const Box& box) {
  nlohmann::json record = {{"version", 1},
                           {"id", box.id},
                           {"agent_pid", ::getpid()},
                           // A pid alone is not this agent: in a container every agent is pid 1.
                           {"agent_start", StartTimeOf(::getpid())},
                           {"init_pid", box.sandbox->pid()},
                           {"init_start", box.init_start},
                           {"cgroups", box.sandbox->cgroup().paths()},
                           {"restart_grace_ms", box.sandbox->restart_grace_ms()},
                           {"probe_pid", box.probe_pid},
                           {"probe_start", box.probe_start},
                           {"probe_listener", box.probe_listener},
                           {"mounts", box.mounts},
                           {"cpus", box.limits.cpus},
                           // For its egress (AdoptOne): the policy, as the agent gave it.
                           {"policy", box.spec.policy}};
  // Atomically: a reader (the next agent) sees the old record or the new one, never half.
  const std::string tmp = absl::StrCat(box.record_path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << record.dump() << "\n";
    if (!out) return absl::InternalError(absl::StrCat("write \"", tmp, "\""));
  }
  if (::rename(tmp.c_str(), box.record_path.c_str()) != 0) {
    return ErrnoStatus(absl::StrCat("rename \"", tmp, "\" to \"", box.record_path, "\""));
  }
  return absl::OkStatus();
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
  // A command of plain words runs without the shell's extra process (direct_command.h), with
  // the PWD the shell would have exported; if that exec fails, through the shell after all, so
  // that its messages and exit codes are the shell's.
  std::string path, pwd;
  for (const auto& [name, value] : merged) {
    if (name == "PATH") path = value;
    if (name == "PWD") pwd = value;
  }
  if (pwd.empty() || pwd == cwd) {
    if (std::optional<std::vector<std::string>> argv = DirectArgv(request.command, path)) {
      std::vector<std::string> direct_env = env;
      if (pwd.empty()) direct_env.push_back(absl::StrCat("PWD=", cwd));
      bool exec_failed = false;
      absl::StatusOr<std::string> started =
          StartCommand(box, request, cwd, *argv, direct_env, &callbacks, &exec_failed);
      if (!exec_failed) return started;
    }
  }
  return StartCommand(box, request, cwd, {"/bin/sh", "-c", request.command}, env, &callbacks,
                      nullptr);
}

absl::StatusOr<std::string> KernelBackend::StartCommand(
    const std::shared_ptr<Box>& box, const ExecRequest& request, const std::string& cwd,
    const std::vector<std::string>& argv, const std::vector<std::string>& env,
    ExecCallbacks* callbacks, bool* exec_failed) {
  const std::string& id = box->id;
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
  command->settle_reports = request.settle_reports;
  if (request.timeout != absl::InfiniteDuration()) {
    command->deadline = command->begin + request.timeout;
  }
  // One pread (cpuacct.usage or cpu.stat): the start of the command's CPU figure.
  if (absl::StatusOr<uint64_t> cpu = box->sandbox->cgroup().ReadCpuNs(); cpu.ok()) {
    command->cpu_start_ns = *cpu;
    if (request.cpu_timeout != absl::InfiniteDuration()) {
      command->cpu_limit_ns = *cpu + static_cast<uint64_t>(std::max<int64_t>(
                                         1, absl::ToInt64Nanoseconds(request.cpu_timeout)));
    }
  } else if (request.cpu_timeout != absl::InfiniteDuration()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a cpu_timeout needs the sandbox's CPU time, which cannot be read: ",
                     cpu.status().message()));
  }
  command->direct = exec_failed != nullptr;
  {
    absl::MutexLock cb(&command->cb_mu);
    command->callbacks = std::move(*callbacks);
  }
  const bool kept = box->sandbox->restart_grace_ms() > 0;
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
    if (kept && box->spool) {
      // Before the loop may read output (it watches the pipes from here on).
      command->spool = box->spool;
      WriteFrame(command->spool->get(), 't', command->seq, request.tag);
      // Its deadline, so that a restarted agent still ends it on time (Adopt).
      if (command->deadline != absl::InfiniteFuture()) {
        WriteFrame(command->spool->get(), 'd', command->seq,
                   absl::StrCat(absl::ToUnixNanos(command->deadline)));
      }
    }
  }
  absl::Status sent = box->sandbox->SendExec(
      command->seq, cwd, argv, env, dev_null_.get(), out_w.get(), err_w.get(),
      kept ? command->out.get() : -1, kept ? command->err.get() : -1);
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
  if (command->direct && started.status != 0 && std::strcmp(started.step, "execve") == 0) {
    // Not run: the caller runs it through the shell, with the callbacks back.
    *exec_failed = true;
    {
      absl::MutexLock cb(&command->cb_mu);
      *callbacks = std::move(command->callbacks);
    }
    forget();
    return absl::FailedPreconditionError("the direct exec failed");
  }
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
        // A direct exec that failed is not run either: Exec runs it through the shell.
        command->start_failed =
            e.status != 0 && (std::strcmp(e.step, "execve") != 0 || command->direct);
        started_cv_.SignalAll();
        continue;
      }
      command->exited = true;
      command->wait_status = e.status;
      if (!command->attached) continue;  // Reattach finishes it
    }
    FinishCommand(box, command, "");
  }
}

void KernelBackend::HandleOutput(const std::shared_ptr<Command>& command, bool is_stderr) {
  char buf[kReadChunk];
  ssize_t n;
  uint64_t resumes;
  {
    absl::MutexLock lock(&mu_);
    resumes = command->resumes;
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
  bool more = true;
  {
    absl::MutexLock cb(&command->cb_mu);
    if (command->finished) return;
    if (command->spool) {
      WriteFrame(command->spool->get(), is_stderr ? 'e' : 'o', command->seq,
                 absl::string_view(buf, static_cast<size_t>(n)));
    }
    auto& sink = is_stderr ? command->callbacks.on_stderr : command->callbacks.on_stdout;
    if (sink) sink(absl::string_view(buf, static_cast<size_t>(n)));
    if (command->callbacks.accepts_more) more = command->callbacks.accepts_more();
  }
  if (more) return;
  absl::MutexLock lock(&mu_);
  // A ResumeOutput since the read answers a "no more" that came before it: not held.
  if (command->resumes == resumes && !command->held) SetHeldLocked(*command, true);
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
    // Nothing runs: what the spool holds is of ended commands only.
    if (box->commands.empty() && box->spool && *box->spool) ::ftruncate(box->spool->get(), 0);
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
  {
    // The sandbox cgroup's CPU time and peak memory across the command (ExecExit says what
    // they mean), read through the sandbox's Cgroup, which knows v1 from v2 and the baseline
    // of a reused v1 cgroup (cgroup_v1.h).
    // Read for a command that asked for a CPU limit (POST /v1/run's, which reports them) or that
    // failed (an OOM kill is told by it); not on the warm path of every command: the reads cost
    // milliseconds on cgroup v1 (bench/agent.sh: warm p50 1.95 -> 7.37 ms with them).
    const bool wanted = command->cpu_limit_ns > 0 || exit.exit_code != 0 || exit.signal != 0;
    absl::StatusOr<sandbox::CgroupUsage> usage =
        wanted ? box->sandbox->cgroup().ReadUsage()
               : absl::StatusOr<sandbox::CgroupUsage>(absl::UnavailableError("not asked for"));
    if (usage.ok()) {
      if (command->cpu_start_ns.has_value() && usage->cpu_ns >= *command->cpu_start_ns) {
        exit.cpu = absl::Nanoseconds(static_cast<int64_t>(usage->cpu_ns - *command->cpu_start_ns));
      }
      exit.peak_memory_bytes = usage->memory_peak_bytes;
      exit.sandbox_oom_kills = usage->oom_kills;
      exit.sandbox_pids_limit_hits = usage->pids_limit_hits;
    }
    absl::MutexLock lock(&mu_);
    exit.cpu_timed_out = command->cpu_timed_out;
    if ((exit.exit_code != 0 || exit.signal != 0) && usage.ok() &&
        usage->oom_kills > box->oom_kills_seen) {
      exit.oom_killed = true;
      box->oom_kills_seen = usage->oom_kills;
    }
  }
  if (command->settle_reports) {
    // What its egress proxy and its probe decided until its end reaches the caller first.
    box->sandbox->AwaitEgressIdle(kSettleTimeout);
    if (options_.settle_probe) options_.settle_probe(box->id, kSettleTimeout);
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
        if (command->cpu_limit_ns > 0 && !command->cpu_timed_out && !command->timed_out) {
          // CPU time is polled (one pread each): no kernel notification exists for it.
          absl::StatusOr<uint64_t> cpu = box->sandbox->cgroup().ReadCpuNs();
          if (cpu.ok() && *cpu >= command->cpu_limit_ns) {
            command->cpu_timed_out = true;
            command->kill_at = now;
          } else {
            next = std::min(next, now + kCpuPoll);
          }
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
    if (record.is_object() && record.value("agent_pid", 0) == ::getpid() &&
        record.value("agent_start", uint64_t{0}) == StartTimeOf(::getpid())) {
      continue;  // this agent's, made since the look at boxes_ above
    }
    // Its processes: whatever is still in its cgroups (init normally exited when the agent's
    // socket closed, taking its pid namespace along). Only the sandbox's own cgroups.
    std::string rejected;
    const std::vector<std::string> dirs = RecordedCgroups(record, id, &rejected);
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
    // A kept sandbox's cgroup is named after no agent: the stale-cgroup cleanup below does not
    // see it, so it goes here.
    for (const std::string& dir : dirs) {
      if (!absl::StrContains(dir, absl::StrCat("/keep-", id))) continue;
      absl::Status killed =
          cgroupfs::KillUntilEmpty({dir}, cgroupfs::FreezeOps{}, cgroupfs::kKillTimeout);
      absl::Status removed =
          killed.ok() ? cgroupfs::RemoveTree(dir, cgroupfs::kRemoveTimeout) : killed;
      if (removed.ok()) {
        ++report.cgroups_removed;
      } else {
        report.residue.push_back(absl::StrCat("cgroup \"", dir, "\": ", removed.message()));
      }
    }
    if (::unlink(path.c_str()) == 0) ++report.workspaces_removed;
  }
  // The cgroups of kept sandboxes that nothing names (their state dir is gone, say).
  if (absl::StatusOr<int> swept = RemoveUnusedKeptCgroups(); swept.ok()) {
    report.cgroups_removed += *swept;
  } else {
    report.residue.push_back(std::string(swept.status().message()));
  }
  // The cgroups of sandboxes whose agent is gone (named "<dead pid>-<id>").
  absl::StatusOr<std::vector<std::string>> removed =
      sandbox::CleanupStaleCgroups(factory_->cgroup_layout());
  if (!removed.ok()) {
    report.residue.push_back(absl::StrCat("stale cgroups: ", removed.status().message()));
  } else {
    report.cgroups_removed += static_cast<int>(removed->size());
  }
  return report;
}

}  // namespace moat::agent

namespace moat::agent {

void KernelBackend::Release() {
  // Those that cannot outlive the agent (no grace configured) end cleanly now.
  std::vector<std::string> ending;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, box] : boxes_) {
      if (box->sandbox->restart_grace_ms() == 0) ending.push_back(id);
    }
  }
  for (const std::string& id : ending) Destroy(id).IgnoreError();
  stop_ = true;
  Wake();
  if (loop_.joinable()) loop_.join();
  absl::flat_hash_map<std::string, std::shared_ptr<Box>> boxes;
  {
    absl::MutexLock lock(&mu_);
    boxes.swap(boxes_);
    watches_.clear();
  }
  for (auto& [id, box] : boxes) {
    absl::MutexLock io(&box->io_mu);
    // Records and spool files stay for the next agent; without a grace init ends here.
    box->sandbox->Release();
  }
}

absl::StatusOr<std::vector<AdoptedSandboxInfo>> KernelBackend::Adopt() {
  std::vector<AdoptedSandboxInfo> adopted;
  if (options_.restart_grace <= absl::ZeroDuration()) return adopted;
  const std::string dir = absl::StrCat(options_.state_dir, "/sandboxes");
  DIR* records = ::opendir(dir.c_str());
  if (records == nullptr) return ErrnoStatus(absl::StrCat("read \"", dir, "\""));
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(records)) {
    std::string name = e->d_name;
    if (absl::EndsWith(name, ".json")) names.push_back(name);
  }
  ::closedir(records);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string id = name.substr(0, name.size() - 5);
    if (!IsValidSandboxId(id)) continue;
    absl::StatusOr<std::string> text = cgroupfs::ReadFile(absl::StrCat(dir, "/", name));
    if (!text.ok()) continue;
    AdoptedSandboxInfo info;
    info.id = id;
    absl::StatusOr<std::shared_ptr<Box>> box = AdoptOne(id, *text, &info);
    if (!box.ok()) {
      // CleanLeftovers cleans it, as a crashed agent's.
      LogWarning(absl::StrCat("sandbox ", id, " not re-adopted: ", box.status().message()));
      continue;
    }
    LogInfo(absl::StrCat("sandbox ", id, " re-adopted with ", info.commands.size(), " command(s)"));
    adopted.push_back(std::move(info));
  }
  return adopted;
}

absl::StatusOr<std::shared_ptr<KernelBackend::Box>> KernelBackend::AdoptOne(
    const std::string& id, const std::string& text, AdoptedSandboxInfo* info) {
  nlohmann::json record = nlohmann::json::parse(text, nullptr, false);
  if (!record.is_object() || record.value("version", 0) != 1) {
    return absl::FailedPreconditionError("its record is of another version");
  }
  {
    // Ours already (its init is connected to us: taking its socket would confuse both).
    absl::MutexLock lock(&mu_);
    if (boxes_.contains(id)) return absl::AlreadyExistsError("it is this backend's already");
  }
  const uint32_t grace_ms = record.value("restart_grace_ms", 0u);
  if (grace_ms == 0) return absl::FailedPreconditionError("it was made without a restart grace");
  const pid_t init = record.value("init_pid", 0);
  const uint64_t init_start = record.value("init_start", uint64_t{0});
  if (init <= 0 || init_start == 0 || StartTimeOf(init) != init_start) {
    return absl::NotFoundError("its init is gone");
  }
  UniqueFd pidfd(PidfdOpen(init));
  // Checked again with the pidfd held: the pid cannot be reused from here on.
  if (!pidfd || StartTimeOf(init) != init_start) return absl::NotFoundError("its init is gone");

  // The seccomp listener, from the old probe (which holds it as fd 5), which then goes. A sandbox
  // made with a probe whose probe is gone (killed with its agent's container, say) lost its
  // listener: its watched calls now fail with ENOSYS and report nothing, so it is not the sandbox
  // that was made, and is ended (CleanLeftovers) instead of served.
  UniqueFd listener;
  const pid_t probe = record.value("probe_pid", -1);
  const uint64_t probe_start = record.value("probe_start", uint64_t{0});
  if (probe > 0) {
    UniqueFd probe_fd;
    if (probe_start != 0 && StartTimeOf(probe) == probe_start) probe_fd.reset(PidfdOpen(probe));
    if (probe_fd && StartTimeOf(probe) == probe_start) {
      listener.reset(static_cast<int>(::syscall(SYS_pidfd_getfd, probe_fd.get(), 5, 0)));
      ::syscall(SYS_pidfd_send_signal, probe_fd.get(), SIGKILL, nullptr, 0);
    }
    if (!listener && record.value("probe_listener", true)) {
      return absl::FailedPreconditionError(
          "its probe is gone, and with it the sandbox's seccomp listener");
    }
  }

  // Its cgroups, renamed after this agent (so that CleanupStaleCgroups keeps them). Only the
  // sandbox's own.
  std::string rejected;
  const std::vector<std::string> old_paths = RecordedCgroups(record, id, &rejected);
  if (!rejected.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("its record names cgroup \"", rejected, "\", not one of a sandbox"));
  }
  std::vector<std::string> paths;
  if (old_paths.empty()) return absl::FailedPreconditionError("its record names no cgroup");
  for (const std::string& path : old_paths) {
    if (absl::StrContains(path, absl::StrCat("/keep-", id))) {
      paths.push_back(path);  // named after no agent: kept as it is
      continue;
    }
    const std::string renamed =
        absl::StrCat(path.substr(0, path.rfind('/') + 1), ::getpid(), "-", id);
    if (::rename(path.c_str(), renamed.c_str()) != 0) {
      absl::Status error = ErrnoStatus(absl::StrCat("rename cgroup \"", path, "\""));
      for (size_t i = 0; i < paths.size(); ++i) ::rename(paths[i].c_str(), old_paths[i].c_str());
      return error;
    }
    paths.push_back(renamed);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<AdoptedCgroup> cgroup, AdoptedCgroup::Open(paths));

  // The supervisor's end of init's new socket. Right after the old agent died, init may not have
  // seen the end of the old socket yet: that one is hung up; wait for the new one.
  UniqueFd sync;
  for (absl::Time give_up = absl::Now() + absl::Seconds(1);;) {
    sync.reset(
        static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), sandbox::kReaperSyncFd, 0)));
    if (sync) {
      struct pollfd p = {sync.get(), POLLOUT, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)) == 0) break;
    }
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError("its init offered no socket to a new agent within 1 s");
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ::fcntl(sync.get(), F_SETFD, FD_CLOEXEC);

  std::vector<sandbox::AdoptedCommand> commands;
  ASSIGN_OR_RETURN(
      std::unique_ptr<sandbox::LiveSandbox> live,
      sandbox::LiveSandbox::Adopt(init, std::move(pidfd), std::move(sync), std::move(cgroup),
                                  std::move(listener), grace_ms, absl::Seconds(1), &commands));
  auto box = std::make_shared<Box>();
  box->id = id;
  box->spec.id = id;
  box->limits.cpus = record.value("cpus", 0.0);
  box->sandbox = std::move(live);
  box->init_start = init_start;
  box->mounts = record.value("mounts", 0);
  box->record_path = absl::StrCat(options_.state_dir, "/sandboxes/", id, ".json");
  box->spec.policy = record.value("policy", "");
  auto undo = absl::MakeCleanup([&] { box->sandbox->Destroy(); });
  // Its egress, as Create made it: the same rules, audit log and observer, served by us now.
  ASSIGN_OR_RETURN(sandbox::Policy policy,
                   ParseAgentPolicy(box->spec.policy, absl::StrCat("policy of ", id)));
  ASSIGN_OR_RETURN(sandbox::Isolation isolation,
                   sandbox::IsolationFor(policy, {.host = host_,
                                                  .audit_log = options_.audit_log,
                                                  .private_paths = PrivatePaths()}));
  if (isolation.egress) {
    egress::EgressOptions e = *std::move(isolation.egress);
    e.sandbox_id = id;
    if (options_.on_egress) {
      e.observer = [cb = options_.on_egress, sid = std::string(id)](
                       bool allowed, const std::string& detail) { cb(sid, allowed, detail); };
    }
    absl::Status resumed = box->sandbox->ResumeEgress(e);
    if (!resumed.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("its egress could not be served again: ", resumed.message()));
    }
  }
  box->root.reset(
      ::open(absl::StrCat("/proc/", init, "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!box->root) return ErrnoStatus("open the sandbox's root from outside");
  ASSIGN_OR_RETURN(box->mount_ns, NamespaceRef::Of(init, "mnt"));
  if (absl::StatusOr<sandbox::CgroupUsage> usage = box->sandbox->cgroup().ReadUsage(); usage.ok()) {
    box->oom_kills_seen = usage->oom_kills;
  }

  const std::string spooled = cgroupfs::ReadFile(SpoolPath(id)).value_or("");
  box->spool = std::make_shared<UniqueFd>(
      ::open(SpoolPath(id).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  std::vector<std::shared_ptr<Command>> adopted;
  for (sandbox::AdoptedCommand& c : commands) {
    auto command = std::make_shared<Command>();
    command->seq = c.seq;
    command->id = absl::StrCat("cmd-", c.seq);
    command->begin = absl::Now();
    command->started = true;
    command->attached = false;
    command->exited = c.exited;
    command->wait_status = c.wait_status;
    command->out = std::move(c.out);
    command->err = std::move(c.err);
    if (command->out) ::fcntl(command->out.get(), F_SETFL, O_NONBLOCK);
    if (command->err) ::fcntl(command->err.get(), F_SETFL, O_NONBLOCK);
    command->spool = box->spool;
    AdoptedCommandInfo ci;
    ci.command_id = command->id;
    ci.exited = c.exited;
    ReadFrames(spooled, [&](char type, uint32_t seq, absl::string_view data) {
      if (seq != c.seq) return;
      int64_t deadline_ns = 0;
      if (type == 't') {
        ci.tag = std::string(data);
      } else if (type == 'd') {
        if (absl::SimpleAtoi(data, &deadline_ns))
          command->deadline = absl::FromUnixNanos(deadline_ns);
      } else {
        command->spooled.emplace_back(type, std::string(data));
      }
    });
    info->commands.push_back(std::move(ci));
    adopted.push_back(std::move(command));
  }
  box->probe_listener = box->sandbox->holds_seccomp_listener();
  if (options_.on_start) RETURN_IF_ERROR(options_.on_start(id, *box->sandbox, box->limits));
  auto unstart = absl::MakeCleanup([&] {
    if (options_.on_destroy) options_.on_destroy(id);
  });
  RETURN_IF_ERROR(RecordProbe(*box));
  RETURN_IF_ERROR(WriteRecord(*box));
  {
    absl::MutexLock lock(&mu_);
    if (boxes_.contains(id)) return absl::AlreadyExistsError("a sandbox of that id is running");
    box->event_token = AddWatchLocked(box->sandbox->event_fd(), Watch{.box = box});
    if (box->event_token == 0) return ErrnoStatus("watch the sandbox's init");
    for (const std::shared_ptr<Command>& c : adopted) {
      box->commands[c->seq] = c;
      next_seq_ = std::max(next_seq_, c->seq + 1);
    }
    boxes_[id] = box;
  }
  Wake();  // the deadlines of its commands count again
  std::move(undo).Cancel();
  std::move(unstart).Cancel();
  return box;
}

absl::Status KernelBackend::Reattach(absl::string_view id, absl::string_view command_id,
                                     ExecCallbacks callbacks) {
  ASSIGN_OR_RETURN(std::shared_ptr<Box> box, Find(id));
  std::shared_ptr<Command> command;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [seq, c] : box->commands) {
      if (c->id == command_id && !c->attached) command = c;
    }
  }
  if (command == nullptr) {
    return absl::NotFoundError(absl::StrCat("no adopted command \"", command_id, "\" in ", id));
  }
  {
    // What the previous agent read, first; then the pipes.
    std::vector<std::pair<char, std::string>> frames;
    {
      absl::MutexLock lock(&mu_);
      frames.swap(command->spooled);
    }
    absl::MutexLock cb(&command->cb_mu);
    command->callbacks = std::move(callbacks);
    for (const auto& [type, data] : frames) {
      if (type == 'o' && command->callbacks.on_stdout) command->callbacks.on_stdout(data);
      if (type == 'e' && command->callbacks.on_stderr) command->callbacks.on_stderr(data);
    }
  }
  bool exited;
  {
    absl::MutexLock lock(&mu_);
    command->attached = true;
    exited = command->exited || box->dead;
    if (!exited) {
      if (command->out) {
        command->out_token = AddWatchLocked(command->out.get(), Watch{.command = command});
      }
      if (command->err) {
        command->err_token =
            AddWatchLocked(command->err.get(), Watch{.command = command, .is_stderr = true});
      }
    }
  }
  if (exited) FinishCommand(box, command, box->dead ? "the sandbox ended" : "");
  return absl::OkStatus();
}

}  // namespace moat::agent
