// The per-sandbox file API's work: files of a sandbox, handled from outside it. The kernel
// backend uses SandboxRoot (everything the sandbox sees, resolved in /proc/<init>/root); the
// constructor serves one directory tree alone (a workspace), as the tests and docs below say.
//
// The agent runs as host root; the workspace belongs to untrusted code that may change it while
// we work (swap a directory for a symlink to "/", leave FIFOs, make trees thousands deep). So no
// path is ever resolved from the host root: every lookup is openat2(root, ...,
// RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) on the workspace's descriptor, which
// makes ".." and absolute symlinks stop at the workspace root, as they would inside the sandbox.
// Last components are then acted on through their parent's descriptor (mkdirat, renameat,
// unlinkat), never by a second lookup of the whole path.
//
// Errors follow the file contract in backend.h: NotFound, InvalidArgument (outside /workspace,
// NUL, the workspace root where an entry is needed), FailedPrecondition (a directory where a
// file is needed or the reverse), ResourceExhausted (the workspace is full).
//
// Symlinks: List reports a symlink itself (lstat), as a non-directory with the link's own size
// (its target's length) and mode, so a listing shows everything that Remove would have to
// remove. Stat, ReadFile, WriteFile's parents and List's directory follow symlinks, inside the
// workspace only: Stat describes what ReadFile would read, and a link that leads nowhere inside
// is described itself (type symlink), so that it can be inspected and removed. Downloads read
// through one descriptor (OpenRead), never the path again.
//
// Thread-safe: no state beyond the constructor's arguments.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "node-agent/backend/backend.h"
#include "util/unique_fd.h"

namespace moat::agent {

// Up to `length` bytes from `offset` of the open file `fd`; past the end: what there is.
absl::StatusOr<std::string> ReadAt(int fd, uint64_t offset, uint64_t length);

class WorkspaceFiles {
 public:
  // `root` is an O_PATH|O_DIRECTORY descriptor of the workspace, kept open by the caller for as
  // long as this object lives. Files and directories made here are chowned to `owner_uid` and
  // `owner_gid` (the sandbox's root on the host), so the sandbox sees them as its own.
  // `display_root` is the workspace's path inside the sandbox, used in FileInfo and messages.
  WorkspaceFiles(int root, uid_t owner_uid, gid_t owner_gid,
                 std::string display_root = "/workspace");

  // The whole of what a sandbox sees: `root` is an O_PATH descriptor of its root
  // (/proc/<init>/root), paths are absolute in the sandbox (relative ones under /workspace), and
  // resolution crosses the sandbox's own mounts (its /tmp and /workspace tmpfs, /proc) as the
  // kernel would for the sandbox, never out of its root. Writes go where the sandbox's mounts and
  // permissions let its owner write (a read-only root refuses the rest: EROFS, 403).
  static WorkspaceFiles SandboxRoot(int root, uid_t owner_uid, gid_t owner_gid);

  // A regular file opened for reading (anything else is FailedPrecondition).
  absl::StatusOr<OpenedFile> OpenRead(absl::string_view path);
  // Up to `length` bytes from `offset` of a regular file; past the end: what there is.
  absl::StatusOr<std::string> ReadFile(absl::string_view path, uint64_t offset, uint64_t length);
  // Creates or atomically replaces a file (parents made as by MakeDirectory) with permission
  // bits `mode & 0777` (set-id and sticky bits are dropped: the agent never makes those).
  absl::Status WriteFile(absl::string_view path, absl::string_view data, uint32_t mode);
  absl::StatusOr<FileInfo> Stat(absl::string_view path);
  // The entries directly in a directory, sorted by path.
  absl::StatusOr<std::vector<FileInfo>> List(absl::string_view path);
  // Like `mkdir -p`: existing directories are fine, a file in the way is FailedPrecondition.
  absl::Status MakeDirectory(absl::string_view path);
  // Renames within the workspace; replaces a file at `to`, never a directory.
  absl::Status Move(absl::string_view from, absl::string_view to);
  // chmod of what `path` leads to (followed inside only), with mode & 0777: the agent never
  // sets set-id or sticky bits.
  absl::Status SetMode(absl::string_view path, uint32_t mode);
  // Removes a file, symlink, or directory with its contents; never follows a symlink.
  absl::Status Remove(absl::string_view path);

 private:
  // Resolves `rel` (from WorkspaceRelativePath; "" is the root) inside the workspace.
  absl::StatusOr<UniqueFd> Open(absl::string_view rel, int flags) const;
  // Makes the directory `rel` and its missing parents; returns its descriptor (O_PATH).
  absl::StatusOr<UniqueFd> MakeDirectories(absl::string_view rel) const;
  absl::StatusOr<FileInfo> StatAt(int dirfd, const std::string& name, absl::string_view rel) const;
  std::string Display(absl::string_view rel) const;
  // A status for a failed step on `rel`, with the contract's code for `errno_value`.
  absl::Status Error(absl::string_view step, absl::string_view rel, int errno_value) const;

  // The path relative to the root this object serves.
  absl::StatusOr<std::string> Relative(absl::string_view path) const;

  const int root_;
  const uid_t owner_uid_;
  const gid_t owner_gid_;
  const std::string display_root_;  // "" for the sandbox's root: paths are "/" + rel
  bool whole_root_ = false;
};

}  // namespace moat::agent
