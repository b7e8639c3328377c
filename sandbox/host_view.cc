#include "sandbox/host_view.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/policy/protected_paths.h"
#include "util/errno_status.h"

namespace moat::sandbox {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Paths the sandbox never sees from the host because it has its own mounts there.
constexpr const char* kPrivateTrees[] = {"/proc", "/sys", "/dev", "/tmp", "/run", "/workspace"};

// Whether `path` is in a tree the sandbox has of its own (its /tmp, /proc, ...), where no host
// file shows anyway.
bool InPrivateTree(absl::string_view path) {
  return std::any_of(std::begin(kPrivateTrees), std::end(kPrivateTrees),
                     [&](const char* tree) { return IsPathUnder(path, tree); });
}

}  // namespace

HostContext CurrentHostContext() {
  HostContext host;
  if (const char* home = std::getenv("HOME"); home && *home) host.home = home;
  if (const char* sudo_user = std::getenv("SUDO_USER"); sudo_user && *sudo_user) {
    host.sudo_home = HomeFromPasswd("/etc/passwd", sudo_user, 0);
  }
  return host;
}

std::string HomeFromPasswd(const std::string& passwd, absl::string_view name, uid_t uid) {
  std::ifstream in(passwd);
  std::string line;
  while (std::getline(in, line)) {
    // name:password:uid:gid:gecos:home:shell
    std::vector<absl::string_view> f = absl::StrSplit(line, ':');
    if (f.size() < 7) continue;
    uint32_t entry_uid;
    bool match =
        name.empty() ? absl::SimpleAtoi(f[2], &entry_uid) && entry_uid == uid : f[0] == name;
    if (match) return std::string(f[5]);
  }
  return "";
}

std::vector<std::string> HostSocketPaths(const std::string& proc_net_unix) {
  std::vector<std::string> paths;
  std::ifstream in(proc_net_unix);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    // "Num RefCount Protocol Flags Type St Inode Path": the path is the rest of the line after
    // seven fields, and may itself contain spaces.
    size_t pos = 0;
    for (int field = 0; field < 7 && pos != std::string::npos; ++field) {
      pos = line.find_first_not_of(' ', pos);
      if (pos != std::string::npos) pos = line.find(' ', pos);
    }
    if (pos == std::string::npos) continue;
    std::string path = line.substr(pos + 1);
    if (absl::StartsWith(path, "/")) paths.push_back(std::move(path));
  }
  return paths;
}

absl::StatusOr<MountOptions> MountOptionsFor(const Policy& policy, const HostContext& host,
                                             const std::optional<std::string>& workspace_dir,
                                             const std::optional<std::string>& working_dir) {
  MountOptions options;
  if (working_dir) {
    if (!absl::StartsWith(*working_dir, "/") || !IsDirectory(*working_dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cwd: \"", *working_dir, "\" is not a directory on this host"));
    }
    for (const char* own : {"/proc", "/sys", "/dev", "/run", "/workspace"}) {
      if (IsPathUnder(*working_dir, own)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--cwd: \"", *working_dir, "\" is under ", own,
                         ", which the sandbox has of its own; it cannot show the host's there"));
      }
    }
    options.working_dir = *working_dir;
  }
  options.tmpfs_bytes = policy.limits.tmpfs_bytes;
  if (workspace_dir) {
    if (!IsDirectory(*workspace_dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--workspace: \"", *workspace_dir, "\" is not a directory"));
    }
    options.workspace_dir = *workspace_dir;
  }
  options.writable_paths = policy.allow_write;
  options.readonly_paths = policy.deny_write;
  if (workspace_dir) {
    // The workspace is a writable host directory too: the same files stay read-only there.
    for (absl::string_view name : ProtectedUnderEachRoot()) {
      options.readonly_paths.push_back(absl::StrCat("/workspace/", name));
    }
  }

  std::vector<std::string> hidden;
  // Homes: the invoking user's (and under sudo the real user's) entirely, unless the policy says
  // otherwise; root's always. Credential stores in every home, whatever the policy.
  std::set<std::string> homes = {"/root"};
  if (!host.home.empty()) homes.insert(host.home);
  if (!host.sudo_home.empty()) homes.insert(host.sudo_home);
  if (DIR* dir = ::opendir(host.home_root.c_str())) {
    while (struct dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") homes.insert(absl::StrCat(host.home_root, "/", name));
    }
    ::closedir(dir);
  }
  hidden.push_back("/root");
  if (policy.hide_home) {
    if (!host.home.empty() && host.home != "/") hidden.push_back(host.home);
    if (!host.sudo_home.empty() && host.sudo_home != "/") hidden.push_back(host.sudo_home);
  }
  // What the sandbox must see at its own path: the writable paths and the working directory.
  // One under a home hidden as a whole is shown through it: the home becomes a read-only
  // skeleton holding just the way down (MountOptions::home_skeletons), its credential stores
  // still hidden.
  std::vector<std::string> shown = policy.allow_write;
  if (working_dir) shown.push_back(*working_dir);
  std::vector<std::string> whole_homes;
  for (const std::string& home : hidden) {
    // A home in a tree the sandbox has of its own (a test's HOME under /tmp) needs no
    // skeleton: what is shown in it gets a mount point in that tree.
    bool holds_shown = !InPrivateTree(home) &&
                       std::any_of(shown.begin(), shown.end(), [&](const std::string& path) {
                         return IsPathUnder(path, home) && path != home;
                       });
    (holds_shown ? options.home_skeletons : whole_homes).push_back(home);
  }
  hidden = whole_homes;
  for (const std::string& home : homes) {
    // A home hidden as a whole needs no look inside (its credentials would be dropped below).
    if (std::find(whole_homes.begin(), whole_homes.end(), home) != whole_homes.end()) continue;
    for (const char* cred : kCredentialPaths) {
      std::string path = absl::StrCat(home, "/", cred);
      if (Exists(path)) hidden.push_back(path);
    }
  }
  // Host sockets and shared scratch space. /var/run is normally a symlink to /run (already
  // empty inside); hide it when it is a real directory.
  if (IsDirectory("/var/run")) hidden.push_back("/var/run");
  if (IsDirectory("/var/tmp")) hidden.push_back("/var/tmp");
  for (const std::string& path : policy.deny_read) hidden.push_back(path);

  std::vector<std::string> dirs_hidden = hidden;
  for (const std::string& socket : HostSocketPaths(host.proc_net_unix)) {
    // A socket in the --workspace directory is also reachable at /workspace/...
    if (workspace_dir && IsPathUnder(socket, *workspace_dir) && socket != *workspace_dir) {
      hidden.push_back(absl::StrCat("/workspace", socket.substr(workspace_dir->size())));
    }
    bool covered = false;
    for (const char* tree : kPrivateTrees) covered = covered || IsPathUnder(socket, tree);
    for (const std::string& dir : dirs_hidden) covered = covered || IsPathUnder(socket, dir);
    if (!covered) hidden.push_back(socket);
  }
  std::sort(hidden.begin(), hidden.end());
  hidden.erase(std::unique(hidden.begin(), hidden.end()), hidden.end());
  // A path under another hidden one is out of reach once that one is covered (covering resolves
  // inside the sandbox's root, so a symlink on the way leads into the covered tree too): covering
  // it as well would only cost the child a mount step. Sorted, an ancestor comes first.
  for (const std::string& path : hidden) {
    // In a tree of the sandbox's own (/tmp, ...) nothing of the host shows but what a writable
    // path or the working directory binds there: only paths inside those need covering (and
    // covering others, say a HOME under /tmp, would cover the mount points made for them).
    // (--workspace binds a host directory at /workspace: what is there is shown too.)
    const bool in_workspace = workspace_dir && IsPathUnder(path, "/workspace");
    if (InPrivateTree(path) && !in_workspace &&
        std::none_of(shown.begin(), shown.end(),
                     [&](const std::string& s) { return IsPathUnder(path, s); })) {
      continue;
    }
    if (std::none_of(options.hidden_paths.begin(), options.hidden_paths.end(),
                     [&](const std::string& dir) { return IsPathUnder(path, dir); })) {
      options.hidden_paths.push_back(path);
    }
  }
  if (working_dir) {
    // A working directory the policy hides (a credential store, denyRead, host sockets) is
    // refused rather than shown empty; one in a writable path is shown by it already.
    for (const std::string& path : options.hidden_paths) {
      if (IsPathUnder(*working_dir, path)) {
        return absl::PermissionDeniedError(absl::StrCat(
            "--cwd: \"", *working_dir, "\" is hidden from the sandbox (under \"", path,
            "\", which the policy or moat's defaults hide); choose another directory"));
      }
    }
    options.show_working_dir =
        std::none_of(policy.allow_write.begin(), policy.allow_write.end(),
                     [&](const std::string& root) { return IsPathUnder(*working_dir, root); }) &&
        (IsPathUnder(*working_dir, "/tmp") ||
         std::any_of(options.home_skeletons.begin(), options.home_skeletons.end(),
                     [&](const std::string& home) { return IsPathUnder(*working_dir, home); }));
  }
  return options;
}

}  // namespace moat::sandbox
