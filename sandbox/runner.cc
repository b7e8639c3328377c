#include "sandbox/runner.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/caps.h"
#include "sandbox/cgroup/run_cgroup.h"
#include "sandbox/contain.h"
#include "sandbox/creation_guard.h"
#include "sandbox/policy/protected_paths.h"
#include "sandbox/prepare.h"
#include "sandbox/spawn.h"
#include "sandbox/supervisor.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

// Runs that died without cleaning up left cgroups behind (their names start with a pid that no
// longer exists); this removes them.
std::function<void()> CleanupAfter(CgroupLayout layout) {
  return [layout = std::move(layout)] { CleanupStaleCgroups(layout).IgnoreError(); };
}

// The (directory, name) pairs the creation guard refuses: each read-only path under a writable
// host directory, as the host names it (a --workspace directory's paths are named under
// /workspace inside).
std::vector<std::string> WritableRoots(const MountOptions& mounts) {
  std::vector<std::string> roots = mounts.writable_paths;
  if (mounts.workspace_dir) roots.push_back(*mounts.workspace_dir);
  return roots;
}

std::vector<ProtectedEntry> ProtectedEntriesFor(const MountOptions& mounts) {
  std::vector<std::string> roots = WritableRoots(mounts);
  if (roots.empty()) return {};
  std::vector<std::string> readonly;
  for (const std::string& path : mounts.readonly_paths) {
    if (mounts.workspace_dir && absl::StartsWith(path, "/workspace/")) {
      readonly.push_back(absl::StrCat(*mounts.workspace_dir, path.substr(strlen("/workspace"))));
    } else {
      readonly.push_back(path);
    }
  }
  return IdentifyProtected(CreationProtection(readonly, roots));
}

// The creation guard for a sandbox whose seccomp program sends its creating calls to a
// listener: the command waits, in its first creating call, for the guard, so nothing is made
// meanwhile. Null when the program guards nothing.
absl::StatusOr<std::unique_ptr<CreationGuard>> StartGuard(const SeccompProgram& seccomp,
                                                          SandboxProcess& proc,
                                                          std::vector<ProtectedEntry> entries,
                                                          std::vector<ProtectedGlob> globs,
                                                          bool rootless) {
  if (!seccomp.guards_creation()) return nullptr;
  CreationGuard::Options guard_options;
  // Its own descriptor: the supervisor closes the listener when the sandbox stops using it.
  guard_options.listener.reset(::fcntl(proc.seccomp_listener.get(), F_DUPFD_CLOEXEC, 0));
  if (!guard_options.listener) {
    KillSandbox(proc);
    return ErrnoStatus("creation guard: duplicate the seccomp listener");
  }
  guard_options.sandbox_pid = proc.pid;
  guard_options.protected_entries = std::move(entries);
  guard_options.protected_globs = std::move(globs);
  guard_options.arch = seccomp.arch();
  // An ordinary user's supervisor has no CAP_SYS_CHROOT on the host: a guard process in the
  // sandbox's user namespace instead of a thread (creation_guard.h).
  guard_options.join_user_namespace = rootless;
  absl::StatusOr<std::unique_ptr<CreationGuard>> started =
      CreationGuard::Start(std::move(guard_options));
  if (started.ok()) return started;
  // A short command may be over, and its init exiting (its root released before it turns
  // zombie, when the pidfd says so) before the guard looks: then no process is left that could
  // create anything. Otherwise nothing runs unguarded.
  struct pollfd ended = {proc.pidfd.get(), POLLIN, 0};
  if (::poll(&ended, 1, /*timeout_ms=*/1000) != 1) {
    KillSandbox(proc);
    return started.status();
  }
  return nullptr;
}

SuperviseOptions SuperviseOptionsFor(const RunRequest& request, const SeccompProgram& seccomp,
                                     CreationGuard* guard) {
  SuperviseOptions watch;
  watch.wall_timeout = request.limits.wall_timeout;
  watch.cpu_timeout = request.limits.cpu_timeout;
  watch.cpus = request.limits.cpus;
  watch.capture = request.capture;
  watch.live_stdout_fd = request.live_stdout_fd;
  watch.live_stderr_fd = request.live_stderr_fd;
  watch.filter_live = request.filter_live;
  watch.stdin_source_fd = request.stdin_fd;
  watch.cancel_fd = request.cancel_fd;
  watch.arch = seccomp.arch();
  watch.creation_guard = guard;
  return watch;
}

void AddViolations(absl::StatusOr<RunResult>& result, std::vector<Violation> more) {
  if (!result.ok()) return;
  result->violations.insert(result->violations.end(), more.begin(), more.end());
}

// `moat run --trace`: the parent's and the child's steps, in the order they happened.
void PrintTrace(absl::Time begin, std::vector<std::pair<const char*, absl::Time>> timeline,
                const SandboxProcess& proc, ChildTrace* child_trace,
                const absl::StatusOr<RunResult>& result) {
  timeline.insert(timeline.end(), proc.timeline.begin(), proc.timeline.end());
  if (child_trace != nullptr) {
    std::vector<std::pair<const char*, absl::Time>> child = child_trace->Timeline();
    timeline.insert(timeline.end(), child.begin(), child.end());
  }
  if (result.ok()) {
    // Init's end: the kernel has torn down its namespaces and killed what was left.
    timeline.emplace_back("init reaped", proc.started + absl::Seconds(result->wall_seconds));
  }
  timeline.emplace_back("supervision done", absl::Now());
  std::stable_sort(timeline.begin(), timeline.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  for (const auto& [phase, at] : timeline) {
    std::fprintf(stderr, "moat trace: %8.3f ms  %s\n", absl::ToDoubleMilliseconds(at - begin),
                 phase);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runner>> Runner::Create(const RunnerOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<HostSetup> host, HostSetup::Detect());
  // Now the slowest step of the first sandbox's setup: the next run's network namespace is made
  // on a thread of its own, and this one's too when no earlier run left one (netns_prep.h).
  std::unique_ptr<NetnsPool> pool;
  if (!options.netns_pool_dir.empty()) {
    pool = std::make_unique<NetnsPool>(options.netns_pool_dir, options.netns_pool_capacity);
  }
  auto network =
      std::make_unique<NetworkPreparation>(CleanupAfter(host->cgroup_layout()), pool.get());
  return std::unique_ptr<Runner>(
      new Runner(std::move(host), std::move(pool), std::move(network), options.rootless_forms));
}

absl::StatusOr<RunResult> Runner::Run(const RunRequest& request) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return absl::InvalidArgumentError("no command given");
  }
  const absl::Time begin = absl::Now();
  // Its thread then removes what crashed runs left (CleanupAfter), off the command's path.
  std::unique_ptr<NetworkPreparation> network =
      network_ ? std::move(network_)
               : std::make_unique<NetworkPreparation>(CleanupAfter(layout()), netns_pool_.get());
  // 1. The cgroup: made now on v2 (the child is cloned into it), by the v1 warm-up otherwise.
  const std::string name = absl::StrCat(::getpid(), "-", runs_++);
  ASSIGN_OR_RETURN(
      std::unique_ptr<RunCgroup> cgroup,
      RunCgroup::Start(layout(), name,
                       {request.limits.memory_bytes, request.limits.pids, request.limits.cpus}));
  const absl::Time cgroup_ready = absl::Now();
  // 2. Seccomp, with the creation guard's listener when read-only paths that do not exist yet
  //    lie under a writable host directory (creation_guard.h).
  std::vector<ProtectedEntry> protected_entries = ProtectedEntriesFor(request.mounts);
  std::vector<ProtectedGlob> protected_globs =
      IdentifyProtectedGlobs(request.deny_write_patterns, WritableRoots(request.mounts));
  ASSIGN_OR_RETURN(const SeccompProgram* seccomp,
                   host_->Seccomp(!protected_entries.empty() || !protected_globs.empty()));
  const absl::Time seccomp_ready = absl::Now();
  // 3. Egress, mounts and the child's plan (prepare.h), shared with the agent.
  std::optional<egress::EgressOptions> egress_options = request.egress;
  if (egress_options) {
    egress_options->sandbox_id = name;
    // Rootless: the sandbox's init makes the listeners, in a network namespace of its own.
    egress_options->rootless = egress_options->rootless || rootless_forms_;
  }
  MountOptions mount_options = request.mounts;
  mount_options.open_in_child = mount_options.open_in_child || rootless_forms_;
  ASSIGN_OR_RETURN(std::unique_ptr<PreparedSandbox> prepared,
                   PrepareSandbox(*host_, {.mounts = &mount_options,
                                           .cpu_timeout = request.limits.cpu_timeout,
                                           .egress = egress_options ? &*egress_options : nullptr,
                                           .seccomp = seccomp,
                                           .argv = request.argv,
                                           .env = request.env}));
  const absl::Time planned = absl::Now();
  egress::EgressSession* egress = prepared->egress.get();
  ContainPlan& plan = prepared->plan;
  plan.Finalize();
  ChildTrace* child_trace = request.trace ? ChildTrace::Create() : nullptr;
  auto unmap_trace = absl::MakeCleanup([child_trace] { ChildTrace::Destroy(child_trace); });
  plan.trace = child_trace;
  // 4. The network namespace made meanwhile. If that failed (or the plan has no room for one
  //    more descriptor), clone3 makes it and the child brings lo up and mounts sysfs: slower,
  //    the same sandbox.
  absl::StatusOr<PreparedNetwork> net = network->Take();
  const absl::Time network_ready = absl::Now();
  //    Init making sockets must own its namespace (contain.h): a prepared one is not its own.
  const bool prepared_net =
      net.ok() && plan.sockets.empty() && prepared->mounts.UseDetachedSysfs(net->sysfs.get());
  plan.loopback_ready = prepared_net;
  // 5. The child.
  SpawnOptions spawn;
  spawn.cgroup = cgroup->made();
  spawn.make_cgroup = [&] { return cgroup->Get(); };
  spawn.pipe_stdin = request.stdin_fd >= 0;
  spawn.before_start = [&](int pidfd) {
    // In its cgroup (whose attach waits for RCU grace periods, which a busy CPU would delay):
    // the next run's network namespace can be made now, beside this one's mount work.
    network->AllowRefill();
    return egress && plan.sockets.empty() ? egress->Attach(pidfd) : absl::OkStatus();
  };
  spawn.take_sockets = [&](std::vector<UniqueFd> sockets) {
    return egress->AttachListeners(std::move(sockets));
  };
  if (prepared_net) spawn.netns_fd = net->netns.get();
  ASSIGN_OR_RETURN(SandboxProcess proc, SpawnSandbox(plan, spawn));
  if (net.ok()) *net = PreparedNetwork{};  // the child has them now
  // 6. The guard, before the command's first creating call returns.
  ASSIGN_OR_RETURN(std::unique_ptr<CreationGuard> guard,
                   StartGuard(*seccomp, proc, std::move(protected_entries),
                              std::move(protected_globs), rootless_forms_));
  // 7. Supervision until init ends, then what egress and the guard refused.
  ASSIGN_OR_RETURN(Cgroup * run_cgroup, cgroup->Get());
  absl::StatusOr<RunResult> result =
      Supervise(proc, *run_cgroup, SuperviseOptionsFor(request, *seccomp, guard.get()));
  if (egress) AddViolations(result, egress->Finish());
  if (result.ok()) result->notes = request.notes;
  if (guard) AddViolations(result, guard->Stop());
  if (request.trace) {
    PrintTrace(begin,
               {{"cgroup ready (v2) or warm-up started (v1)", cgroup_ready},
                {"seccomp ready", seccomp_ready},
                {"mount plan", planned},
                {!prepared_net ? "network namespace not prepared"
                 : network->source() == NetworkPreparation::Source::kPool
                     ? "network namespace from the pool"
                     : "network namespace made meanwhile",
                 network_ready}},
               proc, child_trace, result);
  }
  return result;
}

}  // namespace moat::sandbox
