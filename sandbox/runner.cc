#include "sandbox/runner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/caps.h"
#include "sandbox/contain.h"
#include "sandbox/idmap.h"
#include "sandbox/rlimits.h"
#include "sandbox/spawn.h"
#include "sandbox/supervisor.h"
#include "sandbox/util/errno_status.h"
#include "sandbox/util/status_macros.h"

namespace moat::sandbox {
namespace {

constexpr char kSandboxPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

}  // namespace

std::vector<std::pair<std::string, std::string>> DefaultSandboxEnv() {
  return {{"PATH", kSandboxPath}, {"HOME", "/tmp"},     {"TMPDIR", "/tmp"},
          {"PWD", "/workspace"},  {"LANG", "C.UTF-8"},  {"USER", "root"},
          {"LOGNAME", "root"},    {"HOSTNAME", "moat"}, {"TERM", "dumb"}};
}

absl::StatusOr<std::unique_ptr<Runner>> Runner::Create() {
  ASSIGN_OR_RETURN(CgroupLayout layout, DetectCgroupLayout());
  RETURN_IF_ERROR(PlanCgroup(layout).status());  // a missing controller fails here, early
  ASSIGN_OR_RETURN(IdMapping ids, DefaultIdMapping());
  return std::unique_ptr<Runner>(new Runner(std::move(layout), ids, LastCapability()));
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
  // The cgroup first, then the warm-up: creating a cgroup waits for the lock the warm-up holds
  // during its grace period, while everything after this overlaps with it.
  CgroupLimits limits{request.limits.memory_bytes, request.limits.pids, request.limits.cpus};
  ASSIGN_OR_RETURN(std::unique_ptr<Cgroup> cgroup,
                   Cgroup::Create(layout_, absl::StrCat(::getpid(), "-", runs_++), limits));
  auto destroy = absl::MakeCleanup([&] { cgroup->Destroy().IgnoreError(); });
  const absl::Time cgroup_ready = absl::Now();
  std::unique_ptr<CgroupPrewarm> prewarm =
      std::getenv("MOAT_NO_PREWARM") ? nullptr : CgroupPrewarm::Start(layout_);
  ASSIGN_OR_RETURN(const SeccompProgram* seccomp, Seccomp());
  const absl::Time seccomp_ready = absl::Now();
  MountOptions mount_options = request.mounts;
  UniqueFd workspace_tree;
  if (mount_options.workspace_dir && mount_options.workspace_tree_fd < 0) {
    struct stat st;
    if (::stat(mount_options.workspace_dir->c_str(), &st) != 0) {
      return ErrnoStatus(absl::StrCat("--workspace: \"", *mount_options.workspace_dir, "\""));
    }
    if (st.st_uid != ids_.host_uid) {
      ASSIGN_OR_RETURN(workspace_tree, OpenIdmappedTree(*mount_options.workspace_dir, ids_.host_uid,
                                                        ids_.host_gid));
      mount_options.workspace_tree_fd = workspace_tree.get();
    }
  }
  ASSIGN_OR_RETURN(MountPlan mounts, MountPlan::Build(mount_options));
  const absl::Time planned = absl::Now();

  ContainPlan plan;
  plan.ids = ids_;
  plan.mounts = &mounts;
  plan.rlimits = PlanRlimits(request.limits.cpu_timeout);
  plan.last_cap = last_cap_;
  plan.argv_storage = request.argv;
  std::vector<std::pair<std::string, std::string>> env = DefaultSandboxEnv();
  for (const auto& [name, value] : request.env) {
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
  for (absl::string_view dir : absl::StrSplit(path_value, ':', absl::SkipEmpty())) {
    plan.path_dirs.emplace_back(dir);
  }
  plan.seccomp = seccomp->fprog();
  plan.seccomp_listener = seccomp->notifies();
  plan.Finalize();

  SpawnOptions spawn;
  spawn.cgroup = cgroup.get();
  spawn.pipe_stdin = request.stdin_fd >= 0;
  ASSIGN_OR_RETURN(SandboxProcess proc, SpawnSandbox(plan, spawn));

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
  // Off the command's path: remove what runs that died without cleaning up left behind (their
  // names start with a pid that no longer exists).
  absl::StatusOr<std::vector<std::string>> stale = CleanupStaleCgroups(layout_);
  if (stale.ok() && !stale->empty() && request.trace) {
    std::fprintf(stderr, "moat trace: removed %zu stale cgroup(s)\n", stale->size());
  }
  if (request.trace) {
    std::vector<std::pair<const char*, absl::Time>> timeline = {{"cgroup created", cgroup_ready},
                                                                {"seccomp ready", seccomp_ready},
                                                                {"mount plan", planned}};
    timeline.insert(timeline.end(), proc.timeline.begin(), proc.timeline.end());
    timeline.emplace_back("supervision done", absl::Now());
    for (const auto& [phase, at] : timeline) {
      std::fprintf(stderr, "moat trace: %8.3f ms  %s\n", absl::ToDoubleMilliseconds(at - begin),
                   phase);
    }
  }
  return result;
}

}  // namespace moat::sandbox
