#include "sandbox/runner.h"

#include <fcntl.h>
#include <linux/openat2.h>
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
#include "sandbox/rlimits.h"
#include "sandbox/spawn.h"
#include "sandbox/supervisor.h"
#include "sandbox/util/errno_status.h"
#include "sandbox/util/remove_tree.h"
#include "sandbox/util/status_macros.h"

namespace moat::sandbox {
namespace {

// After a run: if something now exists at the protected `path`, remove it and say what happened.
// The path is resolved without following symlinks: the sandbox could have replaced a parent
// directory with a link to anywhere on the host, and moat runs as root.
std::optional<Violation> RemoveCreatedProtectedPath(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string parent = slash == 0 ? "/" : path.substr(0, slash);
  std::string name = path.substr(slash + 1);
  struct open_how how = {};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  int dirfd = static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, parent.c_str(), &how, sizeof(how)));
  if (dirfd < 0) {
    if (errno == ELOOP) {
      return Violation{"filesystem", absl::StrCat("replaced a directory above read-only path \"",
                                                  path, "\" with a symlink")};
    }
    return std::nullopt;  // the parent is gone: nothing was created there
  }
  std::optional<Violation> found;
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    // O_PATH descriptors cannot be used for unlinkat; reopen the directory for real.
    int real = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (real >= 0) {
      RemoveTreeAt(real, name.c_str()).IgnoreError();  // the violation is reported either way
      ::close(real);
    }
    found =
        Violation{"filesystem", absl::StrCat("created read-only path \"", path, "\"; removed it")};
  }
  ::close(dirfd);
  return found;
}

// Runs that died without cleaning up left cgroups behind (their names start with a pid that no
// longer exists); this removes them.
std::function<void()> CleanupAfter(CgroupLayout layout) {
  return [layout = std::move(layout)] { CleanupStaleCgroups(layout).IgnoreError(); };
}

constexpr char kSandboxPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

}  // namespace

std::vector<std::pair<std::string, std::string>> DefaultSandboxEnv() {
  return {{"PATH", kSandboxPath}, {"HOME", "/tmp"},     {"TMPDIR", "/tmp"},
          {"PWD", "/workspace"},  {"LANG", "C.UTF-8"},  {"USER", "root"},
          {"LOGNAME", "root"},    {"HOSTNAME", "moat"}, {"TERM", "dumb"}};
}

absl::StatusOr<std::unique_ptr<Runner>> Runner::Create(const RunnerOptions& options) {
  ASSIGN_OR_RETURN(CgroupLayout layout, DetectCgroupLayout());
  // The v1 freezer only keeps KillAll safe from processes forking while they are killed; a
  // sandbox's processes all die with its init (pid namespace) anyway. Leaving it out saves one
  // hierarchy to create, join and remove on every run.
  layout.v1_mounts.erase("freezer");
  RETURN_IF_ERROR(PlanCgroup(layout).status());  // a missing controller fails here, early
  // Now the slowest step of the first sandbox's setup: the next run's network namespace is made
  // on a thread of its own, and this one's too when no earlier run left one (netns_prep.h).
  std::unique_ptr<NetnsPool> pool;
  if (!options.netns_pool_dir.empty()) {
    pool = std::make_unique<NetnsPool>(options.netns_pool_dir, options.netns_pool_capacity);
  }
  auto network = std::make_unique<NetworkPreparation>(CleanupAfter(layout), pool.get());
  ASSIGN_OR_RETURN(IdMapping ids, DefaultIdMapping());
  return std::unique_ptr<Runner>(
      new Runner(std::move(layout), ids, LastCapability(), std::move(pool), std::move(network)));
}

absl::StatusOr<const SeccompProgram*> Runner::Seccomp() {
  if (!seccomp_) {
    SeccompOptions options;
    options.notify_violations = true;
    absl::StatusOr<SeccompProgram> program = SeccompProgram::Precompiled(options);
    if (!program.ok()) program = SeccompProgram::Build(options);
    ASSIGN_OR_RETURN(seccomp_, std::move(program));
  }
  return &*seccomp_;
}

absl::StatusOr<RunResult> Runner::Run(const RunRequest& request) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return absl::InvalidArgumentError("no command given");
  }
  const absl::Time begin = absl::Now();
  // Its thread then removes what crashed runs left (CleanupAfter), off the command's path.
  std::unique_ptr<NetworkPreparation> network =
      network_ ? std::move(network_)
               : std::make_unique<NetworkPreparation>(CleanupAfter(layout_), netns_pool_.get());
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
  if (layout_.kind == CgroupLayout::Kind::kV2) {
    ASSIGN_OR_RETURN(cgroup, Cgroup::Create(layout_, cgroup_name, limits));
  } else {
    prewarm = CgroupPrewarm::Start(layout_, "/proc/self/cgroup", [&] {
      if (!cgroup_claimed.exchange(true)) made = Cgroup::Create(layout_, cgroup_name, limits);
    });
  }
  const absl::Time cgroup_ready = absl::Now();
  ASSIGN_OR_RETURN(const SeccompProgram* seccomp, Seccomp());
  const absl::Time seccomp_ready = absl::Now();
  MountOptions mount_options = request.mounts;
  mount_options.sandbox_ids = std::make_pair(ids_.host_uid, ids_.host_gid);
  // Egress: everything that can fail is checked before clone (fail closed); the listeners are
  // bound once the sandbox's network namespace exists (spawn's before_start).
  std::unique_ptr<egress::EgressSession> egress;
  if (request.egress) {
    egress::EgressOptions options = *request.egress;
    options.sandbox_id = cgroup_name;
    ASSIGN_OR_RETURN(egress, egress::EgressSession::Create(options));
    ASSIGN_OR_RETURN(std::string resolv_conf, egress::EgressSession::ResolvConf());
    mount_options.file_overlays.emplace_back(resolv_conf, "/etc/resolv.conf");
  }
  ASSIGN_OR_RETURN(MountPlan mounts, MountPlan::Build(mount_options));
  // A read-only path that does not exist yet cannot be covered by a mount, and under a writable
  // path the sandbox could create it (say .vscode/tasks.json, which an editor would later run on
  // the host). Note such paths now; whatever appears there is removed when the run ends.
  std::vector<std::string> absent_protected;
  for (const std::string& path : mount_options.readonly_paths) {
    // Read-only paths are named as the sandbox sees them; under /workspace that is the
    // --workspace directory on the host.
    std::string host_path = path;
    if (mount_options.workspace_dir && absl::StartsWith(path, "/workspace/")) {
      host_path = absl::StrCat(*mount_options.workspace_dir, path.substr(strlen("/workspace")));
    }
    struct stat st;
    if (::lstat(host_path.c_str(), &st) != 0 && errno == ENOENT) {
      absent_protected.push_back(host_path);
    }
  }
  const absl::Time planned = absl::Now();

  ContainPlan plan;
  plan.ids = ids_;
  plan.mounts = &mounts;
  plan.rlimits = PlanRlimits(request.limits.cpu_timeout);
  plan.last_cap = last_cap_;
  plan.argv_storage = request.argv;
  std::vector<std::pair<std::string, std::string>> env = DefaultSandboxEnv();
  std::vector<std::pair<std::string, std::string>> request_env;
  if (egress) request_env = egress->Env();
  request_env.insert(request_env.end(), request.env.begin(), request.env.end());
  for (const auto& [name, value] : request_env) {
    auto it = std::find_if(env.begin(), env.end(), [&](const auto& e) { return e.first == name; });
    if (it != env.end()) {
      it->second = value;
    } else {
      env.emplace_back(name, value);
    }
  }
  std::string path_value;
  for (const auto& [name, value] : env) {
    plan.env_storage.push_back(absl::StrCat(name, "=", value));
    if (name == "PATH") path_value = value;
  }
  plan.search_path = path_value;
  plan.seccomp = seccomp->fprog();
  plan.seccomp_listener = seccomp->notifies();
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
      ASSIGN_OR_RETURN(cgroup, Cgroup::Create(layout_, cgroup_name, limits));
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
  absl::StatusOr<RunResult> result = Supervise(proc, *cgroup, watch);
  if (egress) {
    std::vector<Violation> denials = egress->Finish();
    if (result.ok()) {
      result->violations.insert(result->violations.end(), denials.begin(), denials.end());
    }
  }
  for (const std::string& path : absent_protected) {
    std::optional<Violation> v = RemoveCreatedProtectedPath(path);
    if (v && result.ok()) result->violations.push_back(*std::move(v));
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
