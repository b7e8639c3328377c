#include "sandbox/runner.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/caps.h"
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
  return std::unique_ptr<Runner>(new Runner(std::move(host), std::move(pool), std::move(network)));
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
  // cgroups. On v2 the cgroup comes first: the child is created inside it. On v1 the warm-up
  // thread starts at once (see cgroup_prewarm.h) and then makes (or claims) the cgroup: that
  // needs the cgroup mutex, which the warm-up holds through its grace period, so on this thread
  // it waits for nobody. The child is moved in after clone3, while it builds its mounts.
  CgroupLimits limits{request.limits.memory_bytes, request.limits.pids, request.limits.cpus};
  const std::string cgroup_name = absl::StrCat(::getpid(), "-", runs_++);
  std::unique_ptr<Cgroup> cgroup;
  // On v1 the empty cgroup is kept for the next run (cgroup_spares.h): no rmdir here, no mkdir
  // there.
  auto recycle = absl::MakeCleanup([&] {
    if (cgroup) cgroup->Recycle().IgnoreError();
  });
  // Declared before the warm-up, which writes them from its thread: destroyed after its join.
  // Whoever comes first makes the cgroup: on a busy machine the thread may not have run by the
  // time clone3 returns, and waiting for it would cost more than doing it here.
  std::atomic<bool> cgroup_claimed{false};
  absl::StatusOr<std::unique_ptr<Cgroup>> made = absl::UnknownError("no cgroup made ahead");
  std::unique_ptr<CgroupPrewarm> prewarm;
  if (layout().kind == CgroupLayout::Kind::kV2) {
    ASSIGN_OR_RETURN(cgroup, Cgroup::Create(layout(), cgroup_name, limits));
  } else {
    prewarm = CgroupPrewarm::Start(layout(), "/proc/self/cgroup", [&] {
      if (!cgroup_claimed.exchange(true)) made = Cgroup::Create(layout(), cgroup_name, limits);
    });
  }
  const absl::Time cgroup_ready = absl::Now();
  // Read-only paths that do not exist yet have nothing to bind over: the creation guard keeps
  // the sandbox from making them (creation_guard.h), under any writable host directory.
  std::vector<ProtectedEntry> protected_entries = ProtectedEntriesFor(request.mounts);
  std::vector<ProtectedGlob> protected_globs =
      IdentifyProtectedGlobs(request.deny_write_patterns, WritableRoots(request.mounts));
  ASSIGN_OR_RETURN(const SeccompProgram* seccomp,
                   host_->Seccomp(!protected_entries.empty() || !protected_globs.empty()));
  const absl::Time seccomp_ready = absl::Now();
  std::optional<egress::EgressOptions> egress_options = request.egress;
  if (egress_options) egress_options->sandbox_id = cgroup_name;
  ASSIGN_OR_RETURN(std::unique_ptr<PreparedSandbox> prepared,
                   PrepareSandbox(*host_, {.mounts = &request.mounts,
                                           .cpu_timeout = request.limits.cpu_timeout,
                                           .egress = egress_options ? &*egress_options : nullptr,
                                           .seccomp = seccomp,
                                           .argv = request.argv,
                                           .env = request.env}));
  const absl::Time planned = absl::Now();
  MountPlan& mounts = prepared->mounts;
  ContainPlan& plan = prepared->plan;
  egress::EgressSession* egress = prepared->egress.get();
  plan.Finalize();
  ChildTrace* child_trace = request.trace ? ChildTrace::Create() : nullptr;
  auto unmap_trace = absl::MakeCleanup([child_trace] { ChildTrace::Destroy(child_trace); });
  plan.trace = child_trace;

  // The network namespace made meanwhile. If that failed (or the plan has no room for one more
  // descriptor), clone3 makes the namespace and the child brings lo up and mounts sysfs, as
  // before: slower, the same sandbox.
  absl::StatusOr<PreparedNetwork> net = network->Take();
  const absl::Time network_ready = absl::Now();
  const bool prepared_net = net.ok() && mounts.UseDetachedSysfs(net->sysfs.get());
  plan.loopback_ready = prepared_net;

  SpawnOptions spawn;
  spawn.cgroup = cgroup.get();
  spawn.make_cgroup = [&]() -> absl::StatusOr<Cgroup*> {
    if (prewarm && cgroup_claimed.exchange(true)) {
      prewarm->Wait();
      ASSIGN_OR_RETURN(cgroup, std::move(made));
    } else {
      ASSIGN_OR_RETURN(cgroup, Cgroup::Create(layout(), cgroup_name, limits));
    }
    return cgroup.get();
  };
  spawn.pipe_stdin = request.stdin_fd >= 0;
  spawn.before_start = [&](int pidfd) {
    // In its cgroup (whose attach waits for RCU grace periods, which a busy CPU would delay):
    // the next run's network namespace can be made now, beside this one's mount work.
    network->AllowRefill();
    return egress ? egress->Attach(pidfd) : absl::OkStatus();
  };
  if (prepared_net) spawn.netns_fd = net->netns.get();
  ASSIGN_OR_RETURN(SandboxProcess proc, SpawnSandbox(plan, spawn));
  if (net.ok()) *net = PreparedNetwork{};  // the child has them now
  // The command waits, in its first creating call, for the guard: nothing is made meanwhile.
  std::unique_ptr<CreationGuard> guard;
  if (seccomp->guards_creation()) {
    CreationGuard::Options guard_options;
    // Its own descriptor: the supervisor closes the listener when the sandbox stops using it.
    guard_options.listener.reset(::fcntl(proc.seccomp_listener.get(), F_DUPFD_CLOEXEC, 0));
    if (!guard_options.listener) {
      KillSandbox(proc);
      return ErrnoStatus("creation guard: duplicate the seccomp listener");
    }
    guard_options.sandbox_pid = proc.pid;
    guard_options.protected_entries = std::move(protected_entries);
    guard_options.protected_globs = std::move(protected_globs);
    guard_options.arch = seccomp->arch();
    absl::StatusOr<std::unique_ptr<CreationGuard>> started =
        CreationGuard::Start(std::move(guard_options));
    if (started.ok()) {
      guard = *std::move(started);
    } else {
      // A short command may be over, and its init exiting (its root released before it turns
      // zombie, when the pidfd says so) before the guard looks: then no process is left that
      // could create anything. Otherwise nothing runs unguarded.
      struct pollfd ended = {proc.pidfd.get(), POLLIN, 0};
      if (::poll(&ended, 1, /*timeout_ms=*/1000) != 1) {
        KillSandbox(proc);
        return started.status();
      }
    }
  }

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
  watch.arch = seccomp->arch();
  watch.creation_guard = guard.get();
  absl::StatusOr<RunResult> result = Supervise(proc, *cgroup, watch);
  if (egress) {
    std::vector<Violation> denials = egress->Finish();
    if (result.ok()) {
      result->violations.insert(result->violations.end(), denials.begin(), denials.end());
    }
  }
  if (result.ok()) result->notes = request.notes;
  if (guard) {
    std::vector<Violation> refused = guard->Stop();
    if (result.ok()) {
      result->violations.insert(result->violations.end(), refused.begin(), refused.end());
    }
  }
  if (request.trace) {
    std::vector<std::pair<const char*, absl::Time>> timeline = {
        {"cgroup ready (v2) or warm-up started (v1)", cgroup_ready},
        {"seccomp ready", seccomp_ready},
        {"mount plan", planned},
        {!prepared_net ? "network namespace not prepared"
         : network->source() == NetworkPreparation::Source::kPool
             ? "network namespace from the pool"
             : "network namespace made meanwhile",
         network_ready}};
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
  return result;
}

}  // namespace moat::sandbox
