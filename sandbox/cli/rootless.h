// `moat run` by an ordinary user (not root): where its state goes and what it needs from the
// host before anything is made.
//
// Root keeps its state under /run/moat and /var/lib/moat. An ordinary user cannot write there;
// its state follows the XDG base directories: the egress audit log in
// `$XDG_STATE_HOME/moat/egress-audit.jsonl` (default `~/.local/state`), the sandboxes'
// resolv.conf (naming the egress DNS stub) in `$XDG_RUNTIME_DIR/moat/` (the user's own tmpfs,
// 0700, emptied at logout; never a made-up fallback), and no network namespace pool (a pooled
// namespace belongs to the host's user namespace, which only root can make one in; the
// sandbox's own user namespace makes its network namespace at clone3 instead, and its init the
// egress listeners in it, sandbox_egress.h).
//
// Limits need a cgroup v2 subtree delegated to the user: on a systemd host a `Delegate=yes`
// scope in the user's manager (`systemd-run --user --scope -p Delegate=yes moat run ...`), which
// systemd marks with the `user.delegate` xattr that cgroup.h reads; elsewhere one an administrator
// made and named with MOAT_CGROUP_PARENT. CheckRootlessCgroup refuses, before any step, a host
// that offers neither, with the step and the fix, instead of the bare EACCES of the cgroup step.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moat::cli {

// What decides where a run's state goes: the effective uid and the environment's XDG variables.
struct StateEnv {
  uid_t euid = 0;
  std::string home;             // $HOME (or the passwd entry's)
  std::string xdg_state_home;   // $XDG_STATE_HOME, "" if unset
  std::string xdg_runtime_dir;  // $XDG_RUNTIME_DIR, "" if unset
};

struct StatePaths {
  std::string audit_log;       // the egress audit log when --audit-log is not given
  std::string netns_pool_dir;  // "" = no pool
  std::string runtime_dir;     // the egress resolv.conf's directory; "" = none to be had
};

// Root: /var/lib/moat/egress-audit.jsonl, /run/moat/netns and /run/moat. Anyone else:
// $XDG_STATE_HOME/moat/egress-audit.jsonl ($HOME/.local/state when unset or not absolute, as
// the XDG spec says), no pool, and $XDG_RUNTIME_DIR/moat ("" when that is unset or not
// absolute). Pure.
StatePaths StatePathsFor(const StateEnv& env);

// The runtime directory of a run with egress: StatePathsFor's, or FailedPrecondition naming the
// step ("egress") and what to do when an ordinary user has none ($XDG_RUNTIME_DIR unset: run in
// a login session or the user manager's scope, which set it, or point it at a 0700 directory of
// the user's own that no one else can write). Pure.
absl::StatusOr<std::string> EgressRuntimeDir(const StateEnv& env);

// Makes the missing directories above `path` (mode 0700), quietly: opening the file says what
// went wrong.
void MakeParentDirs(const std::string& path);

// StateEnv of this process.
StateEnv CurrentStateEnv(const std::string& home);

// What the cgroup check of an ordinary user looks at.
struct RootlessHost {
  uid_t euid = 0;
  std::string user;              // login name, for the messages ("" = "$USER")
  bool v1_controllers = false;   // the layout has v1 hierarchies (v1 or hybrid)
  bool has_v2 = false;           // a cgroup2 mount exists
  bool systemd = false;          // systemd is init (/run/systemd/system)
  bool user_manager = false;     // a systemd user manager runs ($XDG_RUNTIME_DIR/systemd)
  bool requested = false;        // MOAT_CGROUP_PARENT is set
  bool own_delegated = false;    // this process's cgroup carries a delegate xattr
  bool parent_writable = false;  // the cgroup moat would use is this user's to write
  std::string layout;            // CgroupLayout::Describe(), for the messages
};

// OK for root, for a MOAT_CGROUP_PARENT the user can write, and for a run inside a delegated
// cgroup the user can write; else FailedPrecondition naming the step ("rootless cgroup") and
// what to do on this host: cgroup v1 -> boot with pure cgroup v2 or run as root; systemd without
// a user manager -> `loginctl enable-linger`; a user manager -> `systemd-run --user --scope -p
// Delegate=yes`; no systemd -> a delegated cgroup from the administrator via MOAT_CGROUP_PARENT.
// Pure.
absl::Status CheckRootlessCgroup(const RootlessHost& host);

// RootlessHost of this process (reads mountinfo, /proc/self/cgroup, xattrs, access(2)).
absl::StatusOr<RootlessHost> CurrentRootlessHost();

// Ubuntu (23.10 and later; 24.04 by default) restricts unprivileged user namespaces with
// AppArmor: with kernel.apparmor_restrict_unprivileged_userns=1 an unconfined process may still
// create one, but gets no capabilities inside, so the sandbox's first privileged step (its host
// name, its mounts) fails with EPERM. A profile that allows `userns` lifts it for moat alone
// (integrations/pi/apparmor/moat, docs/pi.md).
struct UsernsRestriction {
  uid_t euid = 0;
  // The sysctl's value: -1 when it does not exist (not Ubuntu, no AppArmor).
  int restrict_unprivileged_userns = -1;
  // This process's AppArmor label (/proc/self/attr/apparmor/current): "unconfined", or the
  // profile's name ("moat (unconfined)"); "" when AppArmor says nothing.
  std::string label;
};

// FailedPrecondition, before any step, when the restriction applies to this process: an
// ordinary user, the sysctl at 1, and no profile (label "unconfined"); the message names the
// sysctl, the profile to install and how. A process under a profile is let through: the profile
// decides (a profile without `userns` fails at the first step, whose message says the same).
// Pure.
absl::Status CheckUsernsRestriction(const UsernsRestriction& host);

// UsernsRestriction of this process.
UsernsRestriction CurrentUsernsRestriction();

}  // namespace moat::cli
