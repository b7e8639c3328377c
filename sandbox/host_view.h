// What of the host the sandbox may see: turns a policy into mount options, adding the paths that
// are always hidden (credentials, homes, host sockets).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/mounts.h"
#include "sandbox/policy/policy.h"

namespace moat::sandbox {

// Credential stores under a home directory, hidden in every home the sandbox could see.
inline constexpr const char* kCredentialPaths[] = {
    ".ssh",    ".aws",    ".gnupg",          ".kube",        ".config/gcloud",
    ".docker", ".azure",  ".config/gh",      ".netrc",       ".git-credentials",
    ".npmrc",  ".pypirc", ".password-store", ".config/moat", ".pi"};

struct HostContext {
  std::string home;                              // the invoking user's home ($HOME)
  std::string sudo_home;                         // the home of $SUDO_USER, if moat runs under sudo
  std::string proc_net_unix = "/proc/net/unix";  // injectable for tests
  std::string home_root = "/home";
};

// Reads HOME and SUDO_USER from the environment.
HostContext CurrentHostContext();

// The home directory of the user named `name` (or, if `name` is empty, of `uid`) in `passwd`
// (/etc/passwd format); "" if there is none. Read directly rather than through NSS, so that the
// moat binary can be linked statically (glibc's getpw* needs shared NSS modules at run time).
std::string HomeFromPasswd(const std::string& passwd, absl::string_view name, uid_t uid);

// Bound host sockets listed in /proc/net/unix (path sockets only). A path socket is reachable
// through any read-only view of its directory, so each is covered.
std::vector<std::string> HostSocketPaths(const std::string& proc_net_unix);

// `working_dir` (--cwd): where the command starts, shown at its own path (through a hidden home
// if need be); refused when the policy hides it. Without it the command starts in /workspace.
absl::StatusOr<MountOptions> MountOptionsFor(
    const Policy& policy, const HostContext& host, const std::optional<std::string>& workspace_dir,
    const std::optional<std::string>& working_dir = std::nullopt);

}  // namespace moat::sandbox
