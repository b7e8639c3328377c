#include "sandbox/root_tree.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "sandbox/util/errno_status.h"
#include "sandbox/util/status_macros.h"

namespace moat::sandbox {
namespace {

// Set once a kernel has refused to mount onto a detached tree; it will not change its mind.
std::atomic<bool> detached_trees_unsupported{false};

constexpr uint64_t kReadOnlyHost = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr uint64_t kDevice = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;

// Errors that mean a host entry vanished or cannot be reached: the child-built root skipped
// those too (its binds of top-level entries are optional).
bool Vanished(int err) { return err == ENOENT || err == EACCES || err == ENOTDIR || err == ELOOP; }

absl::Status SetAttr(int fd, unsigned int flags, uint64_t attrs, absl::string_view what) {
  struct mount_attr attr = {};
  attr.attr_set = attrs;
  if (::mount_setattr(fd, "", AT_EMPTY_PATH | flags, &attr, sizeof(attr)) != 0) {
    return ErrnoStatus(absl::StrCat("root tree: make ", what, " read-only (mount_setattr)"));
  }
  return absl::OkStatus();
}

class Builder {
 public:
  explicit Builder(const RootTreeSpec& spec) : spec_(spec) {}

  absl::StatusOr<UniqueFd> Build() {
    ASSIGN_OR_RETURN(UniqueFd root,
                     Tmpfs("/", "0755", 1 << 20, 4096, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
    for (const HostEntry& entry : spec_.host_entries) RETURN_IF_ERROR(AddHostEntry(root, entry));
    for (const std::string& dir : spec_.own_dirs) RETURN_IF_ERROR(MakeDir(root, dir));
    // An empty read-only /run: hides the host's sockets, and is what the child clones to cover
    // hidden directories.
    ASSIGN_OR_RETURN(UniqueFd run, Tmpfs("/run", "0755", 4096, 16,
                                         MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                             MOUNT_ATTR_NOEXEC));
    RETURN_IF_ERROR(Attach(run, root, "run", "/run"));
    RETURN_IF_ERROR(SetAttr(root.get(), AT_RECURSIVE, kReadOnlyHost, "the host's entries"));

    ASSIGN_OR_RETURN(UniqueFd dev, Dev());
    RETURN_IF_ERROR(Attach(dev, root, "dev", "/dev"));
    ASSIGN_OR_RETURN(UniqueFd tmp, Tmpfs("/tmp", "1777", spec_.tmpfs_bytes, 0,
                                         MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
    RETURN_IF_ERROR(Attach(tmp, root, "tmp", "/tmp"));
    if (spec_.workspace_tmpfs) {
      ASSIGN_OR_RETURN(UniqueFd workspace, Tmpfs("/workspace", "0755", spec_.tmpfs_bytes, 0,
                                                 MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
      RETURN_IF_ERROR(Attach(workspace, root, "workspace", "/workspace"));
    }
    return root;
  }

 private:
  // A detached tmpfs whose root belongs to the sandbox's root.
  absl::StatusOr<UniqueFd> Tmpfs(absl::string_view where, const std::string& mode, uint64_t bytes,
                                 uint64_t inodes, uint64_t attrs) {
    const std::string what = absl::StrCat("root tree: tmpfs for ", where);
    UniqueFd context(::fsopen("tmpfs", FSOPEN_CLOEXEC));
    if (!context) return ErrnoStatus(absl::StrCat(what, " (fsopen)"));
    auto set = [&](const char* key, const std::string& value) {
      return ::fsconfig(context.get(), FSCONFIG_SET_STRING, key, value.c_str(), 0) == 0;
    };
    // "source" only names it in mountinfo; a read-only mount also gets a read-only superblock,
    // as a mount(2) with MS_RDONLY would.
    if (!set("source", "tmpfs") || !set("mode", mode) || !set("size", absl::StrCat(bytes)) ||
        ((attrs & MOUNT_ATTR_RDONLY) != 0 &&
         ::fsconfig(context.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0) ||
        (inodes != 0 && !set("nr_inodes", absl::StrCat(inodes))) ||
        !set("uid", absl::StrCat(spec_.uid)) || !set("gid", absl::StrCat(spec_.gid)) ||
        ::fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
      return ErrnoStatus(absl::StrCat(what, " (fsconfig)"));
    }
    UniqueFd mount(::fsmount(context.get(), FSMOUNT_CLOEXEC, attrs));
    if (!mount) return ErrnoStatus(absl::StrCat(what, " (fsmount)"));
    return mount;
  }

  // Mounts the detached `mount` on `name` in the detached tree `tree`. The first such mount
  // tells whether the kernel can do it at all.
  absl::Status Attach(const UniqueFd& mount, const UniqueFd& tree, const char* name,
                      absl::string_view what) {
    if (::move_mount(mount.get(), "", tree.get(), name, MOVE_MOUNT_F_EMPTY_PATH) == 0) {
      attached_any_ = true;
      return absl::OkStatus();
    }
    if (errno == EINVAL && !attached_any_) {
      detached_trees_unsupported = true;
      return absl::UnimplementedError(
          "this kernel cannot mount onto a detached mount tree (Linux 6.15+)");
    }
    return ErrnoStatus(absl::StrCat("root tree: mount ", what));
  }

  // Symlinks would otherwise belong to the supervisor (host root, shown as nobody inside).
  absl::Status Symlink(const UniqueFd& dir, const std::string& target, const char* name) {
    if (::symlinkat(target.c_str(), dir.get(), name) != 0 ||
        ::fchownat(dir.get(), name, spec_.uid, spec_.gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoStatus(absl::StrCat("root tree: symlink \"", name, "\""));
    }
    return absl::OkStatus();
  }

  static absl::Status MakeDir(const UniqueFd& dir, const std::string& name) {
    if (::mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(absl::StrCat("root tree: mkdir \"", name, "\""));
    }
    return absl::OkStatus();
  }

  static absl::Status Touch(const UniqueFd& dir, const char* name) {
    UniqueFd file(::openat(dir.get(), name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    if (!file) return ErrnoStatus(absl::StrCat("root tree: create mount point \"", name, "\""));
    return absl::OkStatus();
  }

  absl::Status AddHostEntry(const UniqueFd& root, const HostEntry& entry) {
    const char* name = entry.name.c_str();
    const std::string host = JoinUnderRoot(spec_.source_root, entry.name);
    switch (entry.kind) {
      case HostEntry::Kind::kSymlink:
        return Symlink(root, entry.link, name);
      case HostEntry::Kind::kDirectory:
        RETURN_IF_ERROR(MakeDir(root, entry.name));
        break;
      case HostEntry::Kind::kFile:
        RETURN_IF_ERROR(Touch(root, name));
        break;
    }
    UniqueFd clone(
        ::open_tree(AT_FDCWD, host.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if (!clone) {
      if (Vanished(errno)) return absl::OkStatus();  // an empty mount point, as before
      return ErrnoStatus(absl::StrCat("root tree: clone host \"", host, "\" (open_tree)"));
    }
    return Attach(clone, root, name, absl::StrCat("host \"", host, "\""));
  }

  absl::StatusOr<UniqueFd> Dev() {
    ASSIGN_OR_RETURN(UniqueFd dev,
                     Tmpfs("/dev", "0755", 64 << 10, 64, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC));
    for (const char* device : kDevDevices) {
      const std::string host = absl::StrCat("/dev/", device);
      RETURN_IF_ERROR(Touch(dev, device));
      UniqueFd clone(::open_tree(AT_FDCWD, host.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
      if (!clone) return ErrnoStatus(absl::StrCat("root tree: clone \"", host, "\""));
      // Read-only: reading and writing the device still work (a read-only mount does not stop
      // writes to device files), but its owner and mode on the host cannot be changed.
      RETURN_IF_ERROR(SetAttr(clone.get(), 0, kDevice, host));
      RETURN_IF_ERROR(Attach(clone, dev, device, host));
    }
    for (const auto& [link, to] : kDevLinks) RETURN_IF_ERROR(Symlink(dev, to, link));
    RETURN_IF_ERROR(MakeDir(dev, "pts"));  // devpts: mounted by the child (its user namespace)
    RETURN_IF_ERROR(MakeDir(dev, "shm"));
    ASSIGN_OR_RETURN(UniqueFd shm, Tmpfs("/dev/shm", "1777", spec_.tmpfs_bytes, 0,
                                         MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
    RETURN_IF_ERROR(Attach(shm, dev, "shm", "/dev/shm"));
    RETURN_IF_ERROR(SetAttr(dev.get(), 0, kReadOnlyHost, "/dev"));  // not its submounts
    return dev;
  }

  const RootTreeSpec& spec_;
  bool attached_any_ = false;
};

}  // namespace

absl::StatusOr<UniqueFd> BuildRootTree(const RootTreeSpec& spec) {
  if (detached_trees_unsupported) {
    return absl::UnimplementedError(
        "this kernel cannot mount onto a detached mount tree (Linux 6.15+)");
  }
  return Builder(spec).Build();
}

}  // namespace moat::sandbox
