// The sandbox's file system view: a read-only copy of the host tree under a fresh tmpfs root,
// private tmpfs /tmp and /workspace, a fresh /proc, a minimal /dev, and hidden paths.
//
// The plan is built in the parent (allocation allowed) and executed in the child right after it
// has become root of its user namespace. Steps, in order (see Execute):
//   1. make every mount private, so nothing we do propagates to the host;
//   2. mount the new root (tmpfs) on the staging directory and create the top-level entries:
//      directories are recursive bind mounts of the host's, symlinks are recreated, and the
//      sandbox's own mount points (/run stays an empty directory);
//   3. make the whole new tree read-only, nosuid, nodev (mount_setattr, AT_RECURSIVE);
//   4. /dev (read-only tmpfs with null, zero, full, random, urandom; tty-less devpts, shm), /proc
//      (fresh, /proc/sys read-only, dangerous entries masked with the empty /run or /dev/null),
//      /sys (read-only), /tmp and /workspace;
//   5. policy mounts: writable binds (host trees the parent opened with open_tree before clone,
//      or, rootless, the child right after step 1), then read-only binds inside them, then
//      hidden paths, all resolved inside the new root (openat2 RESOLVE_IN_ROOT) so host
//      symlinks cannot redirect;
//   6. pivot_root into the new root and detach the old one.
#pragma once

#include <sys/mount.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

struct MountOptions {
  // The host directory whose top-level entries become the sandbox's read-only "/" (a rootfs
  // profile's tree, docs/rootfs.md); "/" shows the host's own. Absolute, not under /tmp (the
  // staging area of the child's mounts).
  std::string root_dir = "/";
  uint64_t tmpfs_bytes = 64ull << 20;        // size of /tmp and /workspace, each
  std::optional<std::string> workspace_dir;  // host dir bound at /workspace, else a tmpfs
  // The sandbox root's ids on the host. A writable host path (workspace or allowWrite) owned by
  // someone else is bound idmapped, so its owner's files appear as the sandbox root's (idmap.h).
  std::optional<std::pair<uid_t, gid_t>> sandbox_ids;
  // Rootless (an ordinary user's run): open_tree of a host path needs CAP_SYS_ADMIN over the
  // mount namespace it lies in, which only root has over the host's. The child, root of its own
  // user namespace, clones the host paths itself in its copy of the host's mounts (kOpenTree,
  // before it stages anything over /tmp), checked against the device and inode the parent saw.
  // No idmap then (that needs root too): files of other owners show as nobody, and the host's
  // permissions decide what the user's sandbox may write, as they decide for the user.
  bool open_in_child = false;
  std::vector<std::string> writable_paths;  // host paths bound read-write at the same path
  std::vector<std::string> readonly_paths;  // re-bound read-only (inside writable ones)
  std::vector<std::string> hidden_paths;    // covered: dirs by an empty dir, files by /dev/null
  // Homes hidden but for the writable paths and the working directory inside them: covered by a
  // read-only tmpfs that holds only the directories on the way down to those.
  std::vector<std::string> home_skeletons;
  // Where the command starts (default /workspace). With `show_working_dir`, the host directory is
  // bound read-only at its own path first (it lies in a home skeleton or the private /tmp).
  std::optional<std::string> working_dir;
  bool show_working_dir = false;
  // Host files bound read-only over existing files of the view: {host file, path inside}, e.g.
  // the egress resolv.conf over /etc/resolv.conf.
  std::vector<std::pair<std::string, std::string>> file_overlays;
};

// One prepared step. All strings are owned by the plan and never move after Build().
struct MountStep {
  enum class Kind {
    kMakePrivate,     // mount(NULL, "/", MS_REC|MS_PRIVATE)
    kTmpfs,           // mount tmpfs on `target` with `data`, `flags`
    kMkdir,           // mkdir `target`
    kSymlink,         // symlink(`source`, `target`)
    kTouch,           // create empty file `target` (mknod)
    kBind,            // bind `source` on `target` (recursive), `flags` = extra MS_ flags
    kSetReadOnly,     // mount_setattr(`target`, `flags` (AT_RECURSIVE or 0), `attrs`)
    kProc,            // mount proc on `target`
    kSysfs,           // mount sysfs on `target` read-only, or attach the detached sysfs `fd`;
                      // an empty read-only directory if refused
    kDevpts,          // mount devpts (newinstance) on `target`
    kOpenTree,        // rootless: clone host path `source` (no symlinks; its device and inode
                      // must be `dev`, `ino`) as a detached nosuid, nodev tree, kept in `slot`
    kAttachInRoot,    // move_mount the detached tree `fd` (opened by the parent from host
                      // path `source`), or the child's tree `slot`, onto `target` resolved
                      // inside the new root
    kReadOnlyInRoot,  // re-bind `target` (resolved inside the new root) read-only
    kHideInRoot,      // cover `target` (resolved inside the new root)
    kMask,            // bind the read-only `source` (an empty directory or /dev/null) on
                      // `target`, a fresh /proc's entry (kernel-made, so no symlink to resolve)
    kPivot,           // pivot_root into `target`, detach the old root, chdir `source`
  };
  Kind kind;
  const char* source = nullptr;
  const char* target = nullptr;
  const char* data = nullptr;
  unsigned long flags = 0;
  int fd = -1;
  int slot = -1;              // kOpenTree, kAttachInRoot: the child's tree
  uint64_t dev = 0, ino = 0;  // kOpenTree
  uint64_t attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;  // kSetReadOnly
  bool optional = false;  // a missing target or source is skipped rather than an error
};

// A top-level entry of the host's root directory as the sandbox shows it.
struct HostEntry {
  enum class Kind { kDirectory, kFile, kSymlink };
  Kind kind;
  std::string name;  // e.g. "usr"
  std::string link;  // kSymlink: its target, recreated as is
};

class MountPlan {
 public:
  // Reads the host's top-level directory and checks that the policy's writable paths exist.
  // Needs CAP_SYS_ADMIN for the writable paths and a --workspace bind (open_tree clones).
  static absl::StatusOr<MountPlan> Build(const MountOptions& options);

  // At most this many writable host trees (allowWrite paths plus the workspace).
  static constexpr size_t kMaxTrees = 48;

  MountPlan(MountPlan&&) = default;
  MountPlan& operator=(MountPlan&&) = default;

  // /sys becomes the detached sysfs mount `fd` (netns_prep.h) instead of one the child mounts.
  // The plan records the descriptor (the caller keeps it open until the child has started).
  // False, and no change, when the child could not inherit one more descriptor.
  bool UseDetachedSysfs(int fd);

  // Child side, async-signal-safe: runs every step in order. On failure writes a ChildFailure to
  // `error_fd` and returns false.
  bool Execute(int error_fd) const;

  const std::vector<MountStep>& steps() const { return steps_; }
  // Descriptors the child must keep open until Execute(): the detached trees to attach. At most
  // kMaxTrees.
  const std::vector<int>& inherited_fds() const { return inherited_fds_; }

 private:
  MountPlan() = default;
  const char* Keep(std::string s);
  // A host tree to attach: the parent's descriptor, or the child's slot (rootless).
  struct Tree {
    int fd = -1;
    int slot = -1;
  };
  // open_tree(OPEN_TREE_CLONE) of a host path, nosuid and nodev; the plan keeps the descriptor.
  // With options.open_in_child, only checked here, and a kOpenTree step for the child.
  absl::StatusOr<Tree> OpenTree(const std::string& path, absl::string_view what,
                                const MountOptions& options);
  // The kAttachInRoot step of `tree`.
  MountStep Attach(const Tree& tree, const char* source, const char* target) const;
  void Add(MountStep step) { steps_.push_back(step); }
  // The root: tmpfs, host entries, own mount points (/run stays empty), read-only.
  void AddRootSteps(const std::vector<HostEntry>& host_entries, const std::string& root_dir);
  // /dev (devpts and shm included).
  void AddDevSteps(const MountOptions& options);
  // /tmp and, without --workspace, /workspace.
  void AddTmpfsSteps(const MountOptions& options);

  std::deque<std::string> strings_;  // deque: references stay valid as it grows
  std::vector<MountStep> steps_;
  std::string new_root_;
  // Detached copies of host directories (open_tree), made before clone: inside the child's mount
  // namespace the staging tmpfs at /tmp hides part of the host, so sources are opened here.
  std::vector<UniqueFd> trees_;
  std::vector<MountStep> child_opens_;  // kOpenTree steps, run right after kMakePrivate
  std::map<std::pair<uid_t, gid_t>, UniqueFd> mapping_namespaces_;  // by owner, for idmaps
  std::vector<int> inherited_fds_;
};

}  // namespace moat::sandbox
