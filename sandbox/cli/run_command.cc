#include "sandbox/cli/run_command.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sandbox/cli/rootless.h"
#include "sandbox/cli/run_flags.h"
#include "sandbox/host_view.h"
#include "sandbox/isolation.h"
#include "sandbox/policy/policy.h"
#include "sandbox/runner.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace moat::cli {
namespace {

// Nothing ran: the sandbox could not be set up (or was asked for wrongly).
constexpr int kSetupFailed = 125;

int Fail(absl::string_view message) {
  std::fprintf(stderr, "moat run: %.*s\n", static_cast<int>(message.size()), message.data());
  return kSetupFailed;
}

std::string HomeDirectory() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  std::string home = sandbox::HomeFromPasswd("/etc/passwd", "", ::getuid());
  return home.empty() ? "/" : home;
}

std::string CurrentDirectory() {
  char buf[4096];
  return ::getcwd(buf, sizeof(buf)) ? std::string(buf) : std::string("/");
}

absl::StatusOr<sandbox::RunRequest> BuildRequest(const RunFlags& flags) {
  ASSIGN_OR_RETURN(PolicyInputs inputs, PolicyInputsFor(flags));
  const sandbox::PolicySources& sources = inputs.sources;
  const std::optional<std::string>& working_dir = inputs.working_dir;
  ASSIGN_OR_RETURN(sandbox::Policy policy, sandbox::ResolvePolicy(sources));
  std::optional<std::string> audit_log;
  if (flags.audit_log) {
    ASSIGN_OR_RETURN(audit_log, sandbox::ResolvePolicyPath(*flags.audit_log, inputs.invocation));
  }
  sandbox::IsolationInputs isolation_inputs;
  isolation_inputs.host = sandbox::CurrentHostContext();
  isolation_inputs.host.home = sources.paths.home;
  if (flags.workspace) {
    // Made absolute without resolving symlinks: the mount plan refuses paths through a symlink.
    ASSIGN_OR_RETURN(isolation_inputs.workspace,
                     sandbox::ResolvePolicyPath(*flags.workspace, inputs.invocation));
  }
  isolation_inputs.working_dir = working_dir;
  // The default log: root's under /var/lib/moat, a user's under $XDG_STATE_HOME (rootless.h).
  if (!audit_log && ::geteuid() != 0) {
    audit_log = StatePathsFor(CurrentStateEnv(sources.paths.home)).audit_log;
    MakeParentDirs(*audit_log);
  }
  isolation_inputs.audit_log = std::move(audit_log);
  ASSIGN_OR_RETURN(sandbox::Isolation isolation, sandbox::IsolationFor(policy, isolation_inputs));
  // The sandbox's resolv.conf: root's under /run/moat, a user's under $XDG_RUNTIME_DIR.
  if (isolation.egress) {
    ASSIGN_OR_RETURN(isolation.egress->runtime_dir,
                     EgressRuntimeDir(CurrentStateEnv(sources.paths.home)));
  }

  sandbox::RunRequest request;
  request.argv = flags.command;
  request.env = policy.env;
  request.deny_write_patterns = policy.deny_write_patterns;
  request.notes = policy.notes;
  if (working_dir) request.env.emplace_back("PWD", *working_dir);
  request.limits = policy.limits;
  request.egress = std::move(isolation.egress);
  request.mounts = std::move(isolation.mounts);
  request.capture = flags.json;
  const char* trace = std::getenv("MOAT_TRACE");
  request.trace = trace != nullptr && *trace != '\0' && std::string(trace) != "0";
  if (!flags.json) request.filter_live = ::isatty(1) || ::isatty(2);
  // Piped or redirected input goes in; a terminal does not (the sandbox gets /dev/null).
  if (!::isatty(0)) request.stdin_fd = 0;
  return request;
}

void ExplainEnding(const sandbox::RunResult& r, const sandbox::RunRequest& request) {
  switch (r.status) {
    case sandbox::RunStatus::kWallTimeout:
      std::fprintf(stderr, "moat: wall-clock limit (%s) reached; the command was killed\n",
                   absl::FormatDuration(request.limits.wall_timeout).c_str());
      break;
    case sandbox::RunStatus::kCpuTimeout:
      std::fprintf(stderr, "moat: CPU-time limit (%s) reached; the command was killed\n",
                   absl::FormatDuration(request.limits.cpu_timeout).c_str());
      break;
    case sandbox::RunStatus::kOomKilled:
      std::fprintf(stderr, "moat: memory limit (%s) reached; the command was killed\n",
                   FormatSize(request.limits.memory_bytes).c_str());
      break;
    default:
      break;
  }
  for (const sandbox::Violation& v : r.violations) {
    std::fprintf(stderr, "moat: violation (%s): %s\n", v.kind.c_str(), v.detail.c_str());
  }
}

}  // namespace

absl::StatusOr<PolicyInputs> PolicyInputsFor(const RunFlags& flags) {
  PolicyInputs inputs;
  sandbox::PolicySources& sources = inputs.sources;
  sources.paths.home = HomeDirectory();
  sources.paths.cwd = CurrentDirectory();
  inputs.invocation = sources.paths;
  // File names relative to moat's own directory, like --policy's.
  for (const std::string& file : flags.user_policy_files) {
    ASSIGN_OR_RETURN(std::string path, sandbox::ResolvePolicyPath(file, sources.paths));
    sources.user_files.push_back(std::move(path));
  }
  if (flags.cwd) {
    // Made absolute without resolving symlinks (the mount plan refuses a path through one). It
    // is the project whose policy files count, and "." in a policy means it.
    ASSIGN_OR_RETURN(inputs.working_dir, sandbox::ResolvePolicyPath(*flags.cwd, sources.paths));
    sources.paths.cwd = *inputs.working_dir;
  }
  sources.explicit_file = flags.policy_file;
  sources.flags = flags.layer;
  return inputs;
}

int RunCommandMain(const std::vector<std::string>& args) {
  absl::StatusOr<RunFlags> flags = ParseRunFlags(args);
  if (!flags.ok()) return Fail(flags.status().message());
  if (flags->help) {
    std::fputs(kRunUsage, stdout);
    return 0;
  }
  // Interrupts and terminations stop the sandbox and clean up instead of killing moat outright.
  // Blocked before any thread starts, so that none of them takes the signal.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
  ::sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  int cancel_fd = ::signalfd(-1, &stop_signals, SFD_CLOEXEC);
  if (cancel_fd < 0) return Fail("cannot watch for interrupts (signalfd)");

  // An ordinary user: refused here, before any step, where AppArmor would leave its sandbox
  // without capabilities or no cgroup is delegated to it.
  if (::geteuid() != 0) {
    if (absl::Status s = CheckUsernsRestriction(CurrentUsernsRestriction()); !s.ok()) {
      return Fail(s.message());
    }
    absl::StatusOr<RootlessHost> host = CurrentRootlessHost();
    if (!host.ok()) return Fail(host.status().message());
    if (absl::Status s = CheckRootlessCgroup(*host); !s.ok()) return Fail(s.message());
  }
  // The runner first: it starts the slow cgroup warm-up, which then overlaps the policy work.
  // MOAT_NETNS_POOL: where network namespaces made ahead wait (netns_pool.h); "off" for none.
  // Default: root's /run/moat/netns; none for a user (rootless.h).
  sandbox::RunnerOptions runner_options;
  runner_options.netns_pool_dir = StatePathsFor(CurrentStateEnv(HomeDirectory())).netns_pool_dir;
  if (const char* pool = std::getenv("MOAT_NETNS_POOL"); pool != nullptr) {
    runner_options.netns_pool_dir = std::strcmp(pool, "off") == 0 ? "" : pool;
  }
  absl::StatusOr<std::unique_ptr<sandbox::Runner>> runner = sandbox::Runner::Create(runner_options);
  if (!runner.ok()) return Fail(runner.status().message());
  absl::StatusOr<sandbox::RunRequest> request = BuildRequest(*flags);
  if (!request.ok()) return Fail(request.status().message());

  // A reader that goes away must not kill the supervisor before it has cleaned up.
  ::signal(SIGPIPE, SIG_IGN);
  request->cancel_fd = cancel_fd;
  absl::StatusOr<sandbox::RunResult> result = (*runner)->Run(*request);
  if (!result.ok()) return Fail(result.status().message());

  if (flags->json) {
    std::cout << sandbox::ToJson(*result).dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace)
              << std::endl;
    return 0;
  }
  ExplainEnding(*result, *request);
  return sandbox::ExitStatusFor(*result);
}

}  // namespace moat::cli
