// Paths inside writable host directories that programs outside the sandbox later take as
// instructions: git runs hooks and honours core.fsmonitor/core.sshCommand from .git/config; Pi
// loads .pi/extensions and settings, Claude Code and other agents .claude/, .agents/ and
// .mcp.json; editors run tasks from .vscode/.idea when the folder is opened; direnv runs .envrc;
// moat reads .moat/policy.yaml, which a sandbox must not rewrite for the next run. Under the home
// (when a writable directory holds it): shell start-up files, git and ssh configuration, session
// autostart, Pi's and moat's own configuration.
//
// This is the one list. Both halves of the rule come from it:
//   - a protected path that exists is bound read-only (MountOptions::readonly_paths);
//   - one that does not exist cannot be made: every step from the writable directory down to it
//     is a (directory, name) pair that the creation guard refuses to create (creation_guard.h),
//     at the moment of creation, so nothing is left to clean whatever ends the run.
// docs/security.md lists the same paths for users.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace moat::sandbox {

// Relative to every writable root (allowWrite, --workspace, and the project directory when it
// is writable).
absl::Span<const absl::string_view> ProtectedUnderEachRoot();

// Relative to the home, when a writable root contains it.
absl::Span<const absl::string_view> ProtectedUnderHome();

// A name that may not be created in a directory, both as host paths ("/repo", ".git").
struct ProtectedName {
  std::string dir;
  std::string name;
  bool operator==(const ProtectedName&) const = default;
};

// The (directory, name) pairs that keep each of `readonly_paths` from being created: for a path
// under one of `writable_roots` (absolute, normalised host paths), each of its components below
// the root, paired with its parent, as far down as the parents exist now. Paths outside every
// writable root need none (nothing there is writable). "/repo/.git/hooks" under "/repo", with
// /repo/.git present, gives ("/repo", ".git") and ("/repo/.git", "hooks").
std::vector<ProtectedName> CreationProtection(const std::vector<std::string>& readonly_paths,
                                              const std::vector<std::string>& writable_roots);

// What the creation guard compares against: the directory by identity, so that no path
// spelling, symlink, bind or rename can reach it under another name.
struct ProtectedEntry {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;
  std::string path;  // the protected path on the host, for messages
};

// A name pattern (a denyWrite glob) that may not be created: in the directory (dev, ino), or, for
// a pattern of any depth, in any directory on one of `devs` (the writable host directories').
struct ProtectedGlob {
  std::string glob;
  bool any_directory = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<dev_t> devs;
  std::string text;  // the pattern, for messages
};

// The globs of `patterns` (PathPattern texts) as the guard checks them: a one-directory pattern
// whose directory is missing protects nothing (nothing can be made in it).
std::vector<ProtectedGlob> IdentifyProtectedGlobs(const std::vector<std::string>& patterns,
                                                  const std::vector<std::string>& writable_roots);

// Stats each pair's directory (without following a final symlink); pairs whose directory is
// gone or not a directory are dropped, since nothing can be created in them.
std::vector<ProtectedEntry> IdentifyProtected(const std::vector<ProtectedName>& names);

}  // namespace moat::sandbox
