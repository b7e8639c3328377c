#include "sandbox/cli/rootless.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/egress/sandbox_egress.h"
#include "sandbox/netns/netns_pool.h"
#include "util/status_macros.h"

namespace moat::cli {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

StatePaths StatePathsFor(const StateEnv& env) {
  if (env.euid == 0) {
    return {.audit_log = egress::kDefaultAuditLog,
            .netns_pool_dir = sandbox::NetnsPool::kDefaultDir,
            .runtime_dir = egress::kRuntimeDir};
  }
  // XDG: a relative value is invalid and is ignored.
  std::string state = env.xdg_state_home;
  if (state.empty() || state[0] != '/') state = absl::StrCat(env.home, "/.local/state");
  const std::string& runtime = env.xdg_runtime_dir;
  return {
      .audit_log = absl::StrCat(state, "/moat/egress-audit.jsonl"),
      .netns_pool_dir = "",
      .runtime_dir = !runtime.empty() && runtime[0] == '/' ? absl::StrCat(runtime, "/moat") : ""};
}

absl::StatusOr<std::string> EgressRuntimeDir(const StateEnv& env) {
  std::string dir = StatePathsFor(env).runtime_dir;
  if (!dir.empty()) return dir;
  return absl::FailedPreconditionError(absl::StrCat(
      "egress: moat runs as uid ", env.euid,
      " (not root) and writes the sandbox's resolv.conf (naming its DNS stub) under "
      "$XDG_RUNTIME_DIR, which is ",
      env.xdg_runtime_dir.empty() ? "not set"
                                  : absl::StrCat("not absolute (\"", env.xdg_runtime_dir, "\")"),
      ": run moat in a login session or in your user manager's scope (`systemd-run --user "
      "--scope -p Delegate=yes moat run ...`), which set it, or set XDG_RUNTIME_DIR to a "
      "directory of yours that only you can write (mode 0700); or leave network.allowedDomains "
      "out, or run moat as root"));
}

void MakeParentDirs(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    ::mkdir(path.substr(0, slash).c_str(), 0700);
  }
}

StateEnv CurrentStateEnv(const std::string& home) {
  return {.euid = ::geteuid(),
          .home = home,
          .xdg_state_home = Env("XDG_STATE_HOME"),
          .xdg_runtime_dir = Env("XDG_RUNTIME_DIR")};
}

absl::Status CheckRootlessCgroup(const RootlessHost& host) {
  if (host.euid == 0) return absl::OkStatus();
  const std::string user = host.user.empty() ? "$USER" : host.user;
  const std::string prefix = absl::StrCat("rootless cgroup: moat runs as uid ", host.euid,
                                          " (not root) and needs a cgroup v2 "
                                          "subtree delegated to it for the sandbox's limits; ");
  const std::string or_root = "; or run moat as root";
  if (host.requested) {
    if (host.parent_writable) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        prefix, "MOAT_CGROUP_PARENT names a cgroup this user cannot write (", host.layout,
        "): have it delegated (chown to uid ", host.euid, ") or unset the variable", or_root));
  }
  if (host.own_delegated && host.parent_writable && !host.v1_controllers) {
    return absl::OkStatus();
  }
  if (host.v1_controllers || !host.has_v2) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "this host has cgroup v1 controllers (", host.layout,
                     "), which are never delegated to users: boot it with pure cgroup v2 "
                     "(systemd.unified_cgroup_hierarchy=1 on the kernel command line)",
                     or_root));
  }
  if (!host.systemd) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "no systemd here to delegate one (", host.layout,
                     "): have the administrator make a cgroup, chown it to uid ", host.euid,
                     " with its cgroup.procs and cgroup.subtree_control, and name it with "
                     "MOAT_CGROUP_PARENT=/path/from/the/cgroup2/root",
                     or_root));
  }
  if (!host.user_manager) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix,
                     "no systemd user manager runs for this user ($XDG_RUNTIME_DIR/systemd is "
                     "missing): `loginctl enable-linger ",
                     user,
                     "` (or log in), then run "
                     "`systemd-run --user --scope -p Delegate=yes moat run ...`",
                     or_root));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(prefix, "this process's cgroup is not delegated",
                   host.own_delegated ? " to this user" : "", " (", host.layout,
                   "): run it in a delegated scope of your user manager, "
                   "`systemd-run --user --scope -p Delegate=yes moat run ...`",
                   or_root));
}

absl::StatusOr<RootlessHost> CurrentRootlessHost() {
  RootlessHost host;
  host.euid = ::geteuid();
  host.user = Env("USER");
  ASSIGN_OR_RETURN(sandbox::CgroupLayout layout, sandbox::DetectCgroupLayout());
  host.layout = layout.Describe();
  host.v1_controllers = !layout.v1_mounts.empty();
  host.has_v2 = !layout.v2_mount.empty();
  host.systemd = IsDirectory("/run/systemd/system");
  const std::string runtime = Env("XDG_RUNTIME_DIR");
  host.user_manager = !runtime.empty() && IsDirectory(runtime + "/systemd");
  if (host.has_v2) {
    const sandbox::V2Placement placement = sandbox::ReadV2Placement(layout.v2_mount);
    host.requested = !placement.requested.empty();
    host.own_delegated = placement.own_delegated;
    // The directory moat makes `moat/` in (and, in its own cgroup, `moat-supervisor/`).
    host.parent_writable = ::access(layout.v2_parent.c_str(), W_OK) == 0 &&
                           ::access((layout.v2_parent + "/cgroup.procs").c_str(), W_OK) == 0;
  }
  return host;
}

absl::Status CheckUsernsRestriction(const UsernsRestriction& host) {
  if (host.euid == 0 || host.restrict_unprivileged_userns != 1) return absl::OkStatus();
  if (host.label != "unconfined") return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "user namespaces: this host's AppArmor restricts unprivileged user namespaces "
      "(kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu's default) and moat runs without "
      "a profile, so its sandbox would get no capabilities inside and could not be set up. "
      "Install moat's profile (integrations/pi/apparmor/moat, in the moat-pi package too; its "
      "path must match this moat binary): `sudo install -m 644 apparmor/moat "
      "/etc/apparmor.d/moat && sudo apparmor_parser -r /etc/apparmor.d/moat` (docs/pi.md, "
      "\"Ubuntu 24.04\"); or run moat as root"));
}

UsernsRestriction CurrentUsernsRestriction() {
  UsernsRestriction host;
  host.euid = ::geteuid();
  auto read_first_line = [](const char* path) -> std::optional<std::string> {
    std::FILE* f = std::fopen(path, "re");
    if (f == nullptr) return std::nullopt;
    char buf[256] = {};
    const bool got = std::fgets(buf, sizeof(buf), f) != nullptr;
    std::fclose(f);
    if (!got) return std::string();
    std::string line = buf;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\0')) line.pop_back();
    return line;
  };
  if (std::optional<std::string> value =
          read_first_line("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")) {
    int parsed = -1;
    if (absl::SimpleAtoi(*value, &parsed)) host.restrict_unprivileged_userns = parsed;
  }
  std::optional<std::string> label = read_first_line("/proc/self/attr/apparmor/current");
  if (!label) label = read_first_line("/proc/self/attr/current");
  host.label = label.value_or("");
  return host;
}

}  // namespace moat::cli
