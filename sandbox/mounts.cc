#include "sandbox/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sandbox/idmap.h"
#include "util/child_failure.h"
#include "util/errno_status.h"
#include "util/paths.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

// The new root is assembled on a tmpfs mounted here, in the child's private mount namespace.
constexpr char kNewRoot[] = "/tmp";

// Top-level names that get a fresh mount (or stay empty) instead of the host's content.
constexpr std::array<const char*, 6> kOwnTopLevel = {"proc", "sys", "dev",
                                                     "tmp",  "run", "workspace"};

// /dev: the harmless character devices bound from the host, and the usual links.
constexpr std::array<const char*, 5> kDevDevices = {"null", "zero", "full", "random", "urandom"};
constexpr std::array<std::pair<const char*, const char*>, 5> kDevLinks = {{
    {"fd", "/proc/self/fd"},
    {"stdin", "/proc/self/fd/0"},
    {"stdout", "/proc/self/fd/1"},
    {"stderr", "/proc/self/fd/2"},
    {"ptmx", "pts/ptmx"},
}};

// "<root>/<name>" for a top-level entry of the host directory `root` ("/" gives "/<name>").
std::string JoinUnderRoot(const std::string& root, const std::string& name) {
  return root.empty() || root.back() == '/' ? root + name : root + "/" + name;
}

// /proc entries that reveal or touch the host kernel; covered like Docker's masked paths.
constexpr std::array<const char*, 15> kMaskedProc = {
    "/proc/acpi",          "/proc/asound",     "/proc/bus",         "/proc/fs",
    "/proc/irq",           "/proc/scsi",       "/proc/kcore",       "/proc/keys",
    "/proc/kmsg",          "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
    "/proc/sysrq-trigger", "/proc/kallsyms",   "/proc/config.gz"};

// The masked /proc entries this kernel has, and their kind. They are global (the same in every
// procfs instance), so this /proc tells what the sandbox's will show; the child need not look for
// the others. Unless this /proc is not a full procfs (none, or subset=pid, which hides meminfo
// too): then all of them, of unknown kind (the child looks).
struct MaskedEntry {
  const char* path;
  enum Kind { kDirectory, kFile, kUnknown } kind;
};
std::vector<MaskedEntry> MaskedProcEntries() {
  std::vector<MaskedEntry> present;
  const bool have_proc = ::access("/proc/meminfo", F_OK) == 0;
  for (const char* entry : kMaskedProc) {
    struct stat st;
    if (!have_proc) {
      present.push_back({entry, MaskedEntry::kUnknown});
    } else if (::lstat(entry, &st) == 0) {
      present.push_back(
          {entry, S_ISDIR(st.st_mode) ? MaskedEntry::kDirectory : MaskedEntry::kFile});
    } else if (errno != ENOENT) {
      present.push_back({entry, MaskedEntry::kUnknown});
    }
  }
  return present;
}

bool IsOwnTopLevel(const std::string& name) {
  return std::find_if(kOwnTopLevel.begin(), kOwnTopLevel.end(),
                      [&](const char* n) { return name == n; }) != kOwnTopLevel.end();
}

// The host's top-level entries the sandbox shows: directories and files (bound), symlinks
// (recreated); sorted by name. Other kinds (sockets, devices) and the names the sandbox gets
// fresh are left out.
absl::StatusOr<std::vector<HostEntry>> HostTopLevel(const std::string& root_dir) {
  DIR* dir = ::opendir(root_dir.c_str());
  if (dir == nullptr) {
    return ErrnoStatus(absl::StrCat("read the sandbox's root directory \"", root_dir, "\""));
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != ".." && !IsOwnTopLevel(name)) names.push_back(std::move(name));
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  std::vector<HostEntry> entries;
  for (std::string& name : names) {
    const std::string host = JoinUnderRoot(root_dir, name);
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0) continue;  // vanished meanwhile
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = ::readlink(host.c_str(), buf, sizeof(buf) - 1);
      if (n < 0) return ErrnoStatus(absl::StrCat("readlink \"", host, "\""));
      entries.push_back({HostEntry::Kind::kSymlink, std::move(name), std::string(buf, n)});
    } else if (S_ISDIR(st.st_mode)) {
      entries.push_back({HostEntry::Kind::kDirectory, std::move(name), ""});
    } else if (S_ISREG(st.st_mode)) {
      entries.push_back({HostEntry::Kind::kFile, std::move(name), ""});
    }
  }
  return entries;
}

// ---- child side: async-signal-safe helpers ----

int ResolveInRoot(int root_fd, const char* path) {
  while (*path == '/') ++path;
  if (*path == '\0') return ::fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root_fd, path, &how, sizeof(how)));
}

// Errors that mean "the sandbox could not reach this path either": nothing to hide there.
bool Unreachable(int err) {
  return err == ENOENT || err == EACCES || err == ENOTDIR || err == ELOOP;
}

int MoveOnto(int from_fd, int to_fd) {
  return ::move_mount(from_fd, "", to_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
}

// Sets `attrs` on the mount tree at `fd` and makes it private: a clone of a shared host mount
// would stay in the host's peer group, and what is mounted on it later would propagate back.
int SetAttr(int fd, const char* path, unsigned int at_flags, uint64_t attrs) {
  struct mount_attr attr = {};
  attr.attr_set = attrs;
  attr.propagation = MS_PRIVATE;
  return ::mount_setattr(fd, path, at_flags, &attr, sizeof(attr));
}

class ChildMounter {
 public:
  explicit ChildMounter(int error_fd) : error_fd_(error_fd) {
    for (int& fd : trees_) fd = -1;
  }
  ~ChildMounter() {
    if (root_fd_ >= 0) ::close(root_fd_);
    for (int fd : trees_) {
      if (fd >= 0) ::close(fd);
    }
  }

  bool Run(const MountStep& s) {
    switch (s.kind) {
      case MountStep::Kind::kMakePrivate:
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
          return Fail("make all mounts private", "/");
        return true;
      case MountStep::Kind::kTmpfs:
        if (::mount("tmpfs", s.target, "tmpfs", s.flags, s.data) != 0)
          return Fail("mount tmpfs", s.target);
        return true;
      case MountStep::Kind::kMkdir:
        if (::mkdir(s.target, 0755) != 0 && errno != EEXIST) return Fail("mkdir", s.target);
        return true;
      case MountStep::Kind::kSymlink:
        if (::symlink(s.source, s.target) != 0) return Fail("create symlink", s.target);
        return true;
      case MountStep::Kind::kTouch:
        if (::mknod(s.target, S_IFREG | 0644, 0) != 0 && errno != EEXIST)
          return Fail("create mount point file", s.target);
        return true;
      case MountStep::Kind::kBind:
        if (::mount(s.source, s.target, nullptr, MS_BIND | MS_REC | s.flags, nullptr) != 0) {
          if (s.optional && Unreachable(errno)) return true;
          return Fail("bind mount", s.target);
        }
        return true;
      case MountStep::Kind::kSetReadOnly:
        if (SetAttr(AT_FDCWD, s.target, static_cast<unsigned int>(s.flags), s.attrs) != 0)
          return Fail("make read-only (mount_setattr; needs Linux >= 5.12)", s.target,
                      StepNeeds::kNewMountApi);
        return true;
      case MountStep::Kind::kProc:
        if (::mount("proc", s.target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
          return Fail("mount a fresh /proc", s.target);
        return true;
      case MountStep::Kind::kSysfs:
        if (s.fd >= 0) {
          if (::move_mount(s.fd, "", AT_FDCWD, s.target, MOVE_MOUNT_F_EMPTY_PATH) == 0) return true;
        } else if (::mount("sysfs", s.target, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                           nullptr) == 0) {
          return true;
        }
        // Some hosts refuse a new sysfs (it is not "fully visible" there). An empty read-only
        // directory is stricter, so it is a safe substitute.
        if (int err = CoverWithEmptyDir(AT_FDCWD, s.target); err != 0) {
          errno = err;
          return Fail("cover /sys with an empty directory", s.target);
        }
        return true;
      case MountStep::Kind::kDevpts:
        if (::mount("devpts", s.target, "devpts", MS_NOSUID | MS_NOEXEC,
                    "newinstance,ptmxmode=0666,mode=0620") != 0)
          return Fail("mount devpts", s.target);
        return true;
      case MountStep::Kind::kOpenTree:
        return OpenTree(s);
      case MountStep::Kind::kAttachInRoot: {
        if (!EnsureRoot()) return false;
        const int from = s.slot >= 0 ? trees_[s.slot] : s.fd;
        int dst = ResolveInRoot(root_fd_, s.target);
        if (dst < 0) return Fail("resolve mount point", s.target);
        int rc = MoveOnto(from, dst);
        int e = errno;
        ::close(dst);
        errno = e;
        return rc == 0 || Fail("attach writable host path", s.source);
      }
      case MountStep::Kind::kReadOnlyInRoot:
        return ReadOnlyInRoot(s);
      case MountStep::Kind::kHideInRoot:
        return HideInRoot(s);
      case MountStep::Kind::kMask:
        // One call: the source is already read-only, and a bind keeps its mount flags.
        if (::mount(s.source, s.target, nullptr, MS_BIND, nullptr) != 0) {
          if (s.optional && errno == ENOENT) return true;
          return Fail("mask", s.target);
        }
        return true;
      case MountStep::Kind::kPivot:
        return Pivot(s);
    }
    return Fail("unknown mount step", nullptr);
  }

 private:
  bool Fail(const char* step, const char* detail, StepNeeds needs = StepNeeds::kNothingSpecial) {
    return ReportChildFailure(error_fd_, step, detail, errno, needs);
  }

  // Rootless: the host path, in this mount namespace's copy of the host's mounts (the new root
  // is not staged yet), without symlinks, the same file the parent checked, cloned detached and
  // made nosuid, nodev. The user's own user namespace owns this mount namespace, so it may.
  bool OpenTree(const MountStep& s) {
    if (s.slot < 0 || s.slot >= static_cast<int>(MountPlan::kMaxTrees)) {
      errno = EINVAL;
      return Fail("clone host path: bad slot", s.source);
    }
    struct open_how how = {};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    int opened = static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, s.source, &how, sizeof(how)));
    if (opened < 0) return Fail("open host path", s.source);
    struct stat st;
    if (::fstat(opened, &st) != 0) {
      int e = errno;
      ::close(opened);
      errno = e;
      return Fail("open host path", s.source);
    }
    if (static_cast<uint64_t>(st.st_dev) != s.dev || static_cast<uint64_t>(st.st_ino) != s.ino) {
      ::close(opened);
      errno = ESTALE;
      return Fail("host path replaced since moat checked it (run again)", s.source);
    }
    int tree =
        ::open_tree(opened, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
    int e = errno;
    ::close(opened);
    errno = e;
    if (tree < 0) return Fail("clone host path (open_tree)", s.source);
    trees_[s.slot] = tree;
    if (SetAttr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV) != 0)
      return Fail("make host path nosuid,nodev (mount_setattr)", s.source);
    return true;
  }

  bool EnsureRoot() {
    if (root_fd_ >= 0) return true;
    root_fd_ = ::open(kNewRoot, O_PATH | O_DIRECTORY | O_CLOEXEC);
    return root_fd_ >= 0 || Fail("open the new root", kNewRoot);
  }

  // Covers `path` (relative to `dirfd`; "" for dirfd itself) with a clone of the empty read-only
  // directory /run of the new root. Returns 0 or an errno; reports nothing.
  int CoverWithEmptyDir(int dirfd, const char* path) {
    int clone = ::open_tree(AT_FDCWD, "/tmp/run", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (clone < 0) return errno;
    int rc = ::move_mount(clone, "", dirfd, path,
                          MOVE_MOUNT_F_EMPTY_PATH | (path[0] ? 0 : MOVE_MOUNT_T_EMPTY_PATH));
    int err = rc == 0 ? 0 : errno;
    ::close(clone);
    return err;
  }

  // Covers the file `target_fd` with a read-only clone of /dev/null. Returns 0 or an errno.
  int CoverWithNull(int target_fd) {
    int clone = ::open_tree(AT_FDCWD, "/dev/null", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (clone < 0) return errno;
    int rc = SetAttr(clone, "", AT_EMPTY_PATH,
                     MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
    if (rc == 0) rc = MoveOnto(clone, target_fd);
    int err = rc == 0 ? 0 : errno;
    ::close(clone);
    return err;
  }

  // A host path that disappears between the plan (say a socket listed in /proc/net/unix) and
  // this step leaves nothing to cover.
  static bool Vanished(const MountStep& s, int err) {
    return s.optional && (err == ENOENT || err == ESTALE);
  }

  bool HideInRoot(const MountStep& s) {
    if (!EnsureRoot()) return false;
    int fd = ResolveInRoot(root_fd_, s.target);
    if (fd < 0) return Unreachable(errno) || Fail("resolve path to hide", s.target);
    struct stat st;
    int err = ::fstat(fd, &st) != 0 ? errno
              : S_ISDIR(st.st_mode) ? CoverWithEmptyDir(fd, "")
                                    : CoverWithNull(fd);
    ::close(fd);
    if (err == 0 || Vanished(s, err)) return true;
    errno = err;
    return Fail("hide path", s.target);
  }

  bool ReadOnlyInRoot(const MountStep& s) {
    if (!EnsureRoot()) return false;
    int dst = ResolveInRoot(root_fd_, s.target);
    if (dst < 0) return Unreachable(errno) || Fail("resolve read-only path", s.target);
    int clone =
        ::open_tree(dst, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
    bool ok = clone >= 0 || Fail("clone read-only path", s.target);
    if (ok) {
      ok = (SetAttr(clone, "", AT_EMPTY_PATH | AT_RECURSIVE,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV) == 0 &&
            MoveOnto(clone, dst) == 0) ||
           Vanished(s, errno) || Fail("bind read-only", s.target);
      ::close(clone);
    }
    ::close(dst);
    return ok;
  }

  bool Pivot(const MountStep& s) {
    if (root_fd_ >= 0) {
      ::close(root_fd_);
      root_fd_ = -1;
    }
    // pivot_root(".", ".") stacks the old root on top of the new one; detaching it then leaves
    // only the new tree. No directory of the host stays reachable.
    if (::chdir(s.target) != 0) return Fail("chdir to the new root", s.target);
    if (::syscall(SYS_pivot_root, ".", ".") != 0)
      return Fail("pivot_root", s.target, StepNeeds::kNewMountApi);
    if (::umount2(".", MNT_DETACH) != 0) return Fail("detach the old root", "/");
    if (::chdir(s.source) != 0) return Fail("chdir", s.source);
    return true;
  }

  int error_fd_;
  int root_fd_ = -1;
  int trees_[MountPlan::kMaxTrees];  // rootless: the host trees this child cloned (kOpenTree)
};

// The options for a read-only bind of a host path: not idmapped, so it stays owned by its
// host owner (and read-only anyway).
MountOptions PlainCopy(const MountOptions& options) {
  MountOptions plain = options;
  plain.sandbox_ids.reset();
  return plain;
}

}  // namespace

const char* MountPlan::Keep(std::string s) { return strings_.emplace_back(std::move(s)).c_str(); }

absl::StatusOr<MountPlan::Tree> MountPlan::OpenTree(const std::string& path, absl::string_view what,
                                                    const MountOptions& options) {
  if (trees_.size() + child_opens_.size() >= kMaxTrees) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": too many writable paths (at most ", kMaxTrees, ")"));
  }
  // No symlink anywhere in the path: a link planted by an earlier sandbox (in a workspace it
  // could write) must not redirect a writable bind to somewhere else on the host.
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd opened(
      static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how))));
  if (!opened) {
    if (errno == ELOOP) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": \"", path,
          "\" goes through a symlink; give the real path (moat does not follow "
          "symlinks for writable paths: one planted by an earlier run could point anywhere)"));
    }
    return ErrnoStatus(absl::StrCat(what, ": cannot use \"", path, "\""));
  }
  struct stat st;
  if (::fstat(opened.get(), &st) != 0) {
    return ErrnoStatus(absl::StrCat(what, ": cannot use \"", path, "\""));
  }
  if (options.open_in_child) {
    const int slot = static_cast<int>(child_opens_.size());
    child_opens_.push_back({.kind = MountStep::Kind::kOpenTree,
                            .source = Keep(path),
                            .slot = slot,
                            .dev = static_cast<uint64_t>(st.st_dev),
                            .ino = static_cast<uint64_t>(st.st_ino)});
    return Tree{.slot = slot};
  }
  UniqueFd tree(::open_tree(opened.get(), "",
                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH));
  if (!tree) {
    return ErrnoStatus(
        absl::StrCat(what, ": open_tree \"", path, "\" (binding host paths needs root)"));
  }
  int userns_fd = -1;
  if (options.sandbox_ids &&
      (st.st_uid != options.sandbox_ids->first || st.st_gid != options.sandbox_ids->second)) {
    UniqueFd& userns = mapping_namespaces_[{st.st_uid, st.st_gid}];
    if (!userns) {
      ASSIGN_OR_RETURN(userns,
                       MakeMappingUserNamespace(st.st_uid, st.st_gid, options.sandbox_ids->first,
                                                options.sandbox_ids->second));
    }
    userns_fd = userns.get();
  }
  absl::Status prepared = PrepareTree(tree.get(), userns_fd, path);
  if (!prepared.ok())
    return absl::Status(prepared.code(), absl::StrCat(what, ": ", prepared.message()));
  int fd = tree.get();
  trees_.push_back(std::move(tree));
  inherited_fds_.push_back(fd);
  return Tree{.fd = fd};
}

MountStep MountPlan::Attach(const Tree& tree, const char* source, const char* target) const {
  return {.kind = MountStep::Kind::kAttachInRoot,
          .source = source,
          .target = target,
          .fd = tree.fd,
          .slot = tree.slot};
}

absl::StatusOr<MountPlan> MountPlan::Build(const MountOptions& options) {
  MountPlan plan;
  plan.new_root_ = kNewRoot;
  auto in_new_root = [&](absl::string_view path) {
    return plan.Keep(absl::StrCat(kNewRoot, path));
  };
  using K = MountStep::Kind;
  if (options.root_dir.empty() || options.root_dir[0] != '/' ||
      absl::StrContains(absl::StrCat(options.root_dir, "/"), "/../") ||
      absl::StartsWith(options.root_dir, "/tmp/") || options.root_dir == "/tmp") {
    return absl::InvalidArgumentError(absl::StrCat(
        "root directory \"", options.root_dir,
        "\" must be an absolute path without \"..\" and not under /tmp (where the sandbox's "
        "mounts are staged)"));
  }
  ASSIGN_OR_RETURN(std::vector<HostEntry> host_entries, HostTopLevel(options.root_dir));

  // Writable host trees first: a bad path fails before any mount work, and their number decides
  // whether the child can inherit one more descriptor, the root tree's.
  Tree workspace_tree;
  if (options.workspace_dir) {
    ASSIGN_OR_RETURN(workspace_tree, plan.OpenTree(*options.workspace_dir, "--workspace", options));
  }
  std::optional<Tree> working_tree;
  if (options.working_dir && options.show_working_dir) {
    // Read-only, so not idmapped: the files keep their host owners.
    ASSIGN_OR_RETURN(working_tree,
                     plan.OpenTree(*options.working_dir, "--cwd", PlainCopy(options)));
  }
  std::vector<Tree> writable_trees;
  for (const std::string& path : options.writable_paths) {
    ASSIGN_OR_RETURN(Tree tree, plan.OpenTree(path, "filesystem.allowWrite", options));
    // /proc, /sys, /dev and /run have no place for host directories.
    for (const char* own : {"/proc", "/sys", "/dev", "/run"}) {
      if (path == own || absl::StartsWith(path, absl::StrCat(own, "/"))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "filesystem.allowWrite: \"", path, "\" is under ", own,
            ", which the sandbox gets fresh from the kernel; it cannot show a host path there"));
      }
    }
    writable_trees.push_back(tree);
  }

  plan.Add({.kind = K::kMakePrivate});
  plan.AddRootSteps(host_entries, options.root_dir);
  // /dev first: its read-only /dev/null is what masks /proc's files.
  plan.AddDevSteps(options);

  // /proc: a fresh instance for the sandbox's pid namespace.
  plan.Add({.kind = K::kProc, .target = in_new_root("/proc")});
  const char* proc_sys = in_new_root("/proc/sys");
  plan.Add({.kind = K::kBind, .source = proc_sys, .target = proc_sys});
  plan.Add({.kind = K::kSetReadOnly, .target = proc_sys, .flags = AT_RECURSIVE});
  for (const MaskedEntry& masked : MaskedProcEntries()) {
    if (masked.kind == MaskedEntry::kUnknown) {
      plan.Add({.kind = K::kHideInRoot, .target = masked.path, .optional = true});
    } else {
      plan.Add({.kind = K::kMask,
                .source = masked.kind == MaskedEntry::kDirectory ? in_new_root("/run")
                                                                 : in_new_root("/dev/null"),
                .target = in_new_root(masked.path),
                .optional = true});
    }
  }
  plan.Add({.kind = K::kSysfs, .target = in_new_root("/sys")});
  plan.AddTmpfsSteps(options);
  if (options.workspace_dir) {
    plan.Add(plan.Attach(workspace_tree, plan.Keep(*options.workspace_dir), "/workspace"));
  }

  // Policy paths: home skeletons, writable paths and the working directory, then read-only
  // paths inside them, then hidden ones (deny wins).
  for (const std::string& home : options.home_skeletons) {
    plan.Add({.kind = K::kTmpfs,
              .source = "tmpfs",
              .target = in_new_root(home),
              .data = "size=64k,nr_inodes=256,mode=755",
              .flags = MS_NOSUID | MS_NODEV | MS_NOEXEC});
  }
  // Paths under a tmpfs of the sandbox's own (/tmp, /workspace without --workspace, a home
  // skeleton) do not exist there yet: make their mount points.
  auto add_mount_point = [&](const std::string& path) {
    std::string tmpfs;
    if (absl::StartsWith(path, "/tmp/")) tmpfs = "/tmp";
    if (!options.workspace_dir && absl::StartsWith(path, "/workspace/")) tmpfs = "/workspace";
    for (const std::string& home : options.home_skeletons) {
      if (absl::StartsWith(path, absl::StrCat(home, "/"))) tmpfs = home;
    }
    if (tmpfs.empty()) return;
    struct stat st;
    bool is_dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    for (size_t slash = path.find('/', tmpfs.size() + 1); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      plan.Add({.kind = K::kMkdir, .target = in_new_root(path.substr(0, slash))});
    }
    plan.Add({.kind = is_dir ? K::kMkdir : K::kTouch, .target = in_new_root(path)});
  };
  for (size_t i = 0; i < options.writable_paths.size(); ++i) {
    const std::string& path = options.writable_paths[i];
    add_mount_point(path);
    const char* kept = plan.Keep(path);
    plan.Add(plan.Attach(writable_trees[i], kept, kept));
  }
  if (working_tree) {
    add_mount_point(*options.working_dir);
    const char* kept = plan.Keep(*options.working_dir);
    plan.Add(plan.Attach(*working_tree, kept, kept));
    plan.Add({.kind = K::kReadOnlyInRoot, .target = kept});
  }
  for (const std::string& home : options.home_skeletons) {
    // Only the skeleton itself: the trees bound inside keep their own flags.
    plan.Add({.kind = K::kSetReadOnly, .target = in_new_root(home), .flags = 0});
  }
  // Overlays whose place is a symlink into /run (systemd-resolved's /etc/resolv.conf ->
  // ../run/systemd/resolve/stub-resolv.conf): /run is the sandbox's own and empty, so the link
  // would dangle. After the hidden paths (which are covered with that empty /run), a small
  // read-only tmpfs on /run holds the link's target, and the file is bound there.
  std::vector<std::pair<std::string, std::string>> through_run;  // {host file, link target}
  for (const auto& [host_file, inside] : options.file_overlays) {
    // The sandbox sees the host's file at `inside`. With a profile's root, the file is the one
    // in that tree.
    const std::string seen = options.root_dir == "/" ? inside : options.root_dir + inside;
    struct stat st;
    if (::lstat(seen.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      char link[PATH_MAX];
      ssize_t n = ::readlink(seen.c_str(), link, sizeof(link) - 1);
      std::string target;
      if (n > 0) {
        absl::string_view text(link, n);
        target = NormalizeAbsolutePath(
            absl::StartsWith(text, "/")
                ? std::string(text)
                : absl::StrCat(inside.substr(0, inside.rfind('/')), "/", text));
      }
      if (!absl::StartsWith(target, "/run/")) {
        return absl::FailedPreconditionError(absl::StrCat(
            "\"", seen, "\" is a symlink to \"", target.empty() ? "?" : target,
            "\", outside /run; moat binds \"", host_file,
            "\" over it inside the sandbox. Make it a regular file or a link into /run"));
      }
      through_run.emplace_back(host_file, target);
      continue;
    }
    if (::lstat(seen.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("\"", seen, "\" is not a regular file on this host; moat binds \"",
                       host_file, "\" over it inside the sandbox. Make it a regular file"));
    }
    ASSIGN_OR_RETURN(Tree tree, plan.OpenTree(host_file, inside, PlainCopy(options)));
    const char* target = plan.Keep(inside);
    plan.Add(plan.Attach(tree, plan.Keep(host_file), target));
    plan.Add({.kind = K::kReadOnlyInRoot, .target = target});
  }
  for (const std::string& path : options.readonly_paths) {
    plan.Add({.kind = K::kReadOnlyInRoot, .target = plan.Keep(path), .optional = true});
  }
  for (const std::string& path : options.hidden_paths) {
    plan.Add({.kind = K::kHideInRoot, .target = plan.Keep(path), .optional = true});
  }
  if (!through_run.empty()) {
    plan.Add({.kind = K::kTmpfs,
              .source = "tmpfs",
              .target = in_new_root("/run"),
              .data = "size=64k,nr_inodes=64,mode=755",
              .flags = MS_NOSUID | MS_NODEV | MS_NOEXEC});
    for (const auto& [host_file, target] : through_run) {
      for (size_t slash = target.find('/', 5); slash != std::string::npos;
           slash = target.find('/', slash + 1)) {
        plan.Add({.kind = K::kMkdir, .target = in_new_root(target.substr(0, slash))});
      }
      plan.Add({.kind = K::kTouch, .target = in_new_root(target)});
    }
    plan.Add({.kind = K::kSetReadOnly, .target = in_new_root("/run"), .flags = 0});
    for (const auto& [host_file, target] : through_run) {
      ASSIGN_OR_RETURN(Tree tree, plan.OpenTree(host_file, target, PlainCopy(options)));
      const char* kept = plan.Keep(target);
      plan.Add(plan.Attach(tree, plan.Keep(host_file), kept));
      plan.Add({.kind = K::kReadOnlyInRoot, .target = kept});
    }
  }
  plan.Add({.kind = K::kPivot,
            .source = options.working_dir ? plan.Keep(*options.working_dir) : "/workspace",
            .target = kNewRoot});
  // Rootless: the child clones the host paths first, before the new root's tmpfs covers /tmp
  // (where a host path may lie), right after its mounts went private.
  plan.steps_.insert(plan.steps_.begin() + 1, plan.child_opens_.begin(), plan.child_opens_.end());
  return plan;
}

void MountPlan::AddRootSteps(const std::vector<HostEntry>& host_entries,
                             const std::string& root_dir) {
  using K = MountStep::Kind;
  auto in_new_root = [&](absl::string_view path) { return Keep(absl::StrCat(kNewRoot, path)); };
  Add({.kind = K::kTmpfs,
       .target = kNewRoot,
       .data = "mode=0755,size=1m,nr_inodes=4096",
       .flags = MS_NOSUID | MS_NODEV});
  // Top level: the host's directories (and files) as recursive binds, its symlinks recreated.
  for (const HostEntry& entry : host_entries) {
    const std::string host = JoinUnderRoot(root_dir, entry.name);
    const char* target = in_new_root(absl::StrCat("/", entry.name));
    switch (entry.kind) {
      case HostEntry::Kind::kSymlink:
        Add({.kind = K::kSymlink, .source = Keep(entry.link), .target = target});
        continue;
      case HostEntry::Kind::kDirectory:
        Add({.kind = K::kMkdir, .target = target});
        break;
      case HostEntry::Kind::kFile:
        Add({.kind = K::kTouch, .target = target});
        break;
    }
    Add({.kind = K::kBind, .source = Keep(host), .target = target, .optional = true});
  }
  for (const char* name : kOwnTopLevel) {
    Add({.kind = K::kMkdir, .target = in_new_root(absl::StrCat("/", name))});
  }
  // /run stays an empty directory of this read-only tmpfs: it hides the host's sockets and
  // serves as the template that covers hidden directories.
  Add({.kind = K::kSetReadOnly, .target = kNewRoot, .flags = AT_RECURSIVE});
}

void MountPlan::AddDevSteps(const MountOptions& options) {
  using K = MountStep::Kind;
  auto in_new_root = [&](absl::string_view path) { return Keep(absl::StrCat(kNewRoot, path)); };
  // /dev: a small tmpfs with the harmless character devices bound from the host.
  Add({.kind = K::kTmpfs,
       .target = in_new_root("/dev"),
       .data = "mode=0755,size=64k,nr_inodes=64",
       .flags = MS_NOSUID | MS_NOEXEC});
  for (const char* dev : kDevDevices) {
    const char* target = in_new_root(absl::StrCat("/dev/", dev));
    Add({.kind = K::kTouch, .target = target});
    Add({.kind = K::kBind, .source = Keep(absl::StrCat("/dev/", dev)), .target = target});
  }
  for (const auto& [link, to] : kDevLinks) {
    Add({.kind = K::kSymlink, .source = to, .target = in_new_root(absl::StrCat("/dev/", link))});
  }
  Add({.kind = K::kMkdir, .target = in_new_root("/dev/pts")});
  Add({.kind = K::kMkdir, .target = in_new_root("/dev/shm")});
  // Read-only, the tmpfs and the devices on it: reading and writing a device still work (a
  // read-only mount does not stop writes to device files), but its owner and mode on the host
  // cannot be changed. nodev on the tmpfs alone (its own entries are no devices).
  Add({.kind = K::kSetReadOnly,
       .target = in_new_root("/dev"),
       .flags = AT_RECURSIVE,
       .attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC});
  Add({.kind = K::kSetReadOnly, .target = in_new_root("/dev"), .flags = 0});
  // Then the writable ones on top.
  Add({.kind = K::kDevpts, .target = in_new_root("/dev/pts")});
  Add({.kind = K::kTmpfs,
       .target = in_new_root("/dev/shm"),
       .data = Keep(absl::StrCat("mode=1777,size=", options.tmpfs_bytes)),
       .flags = MS_NOSUID | MS_NODEV});
}

void MountPlan::AddTmpfsSteps(const MountOptions& options) {
  using K = MountStep::Kind;
  auto in_new_root = [&](absl::string_view path) { return Keep(absl::StrCat(kNewRoot, path)); };
  const char* tmpfs_data = Keep(absl::StrCat("mode=1777,size=", options.tmpfs_bytes));
  // The writable areas.
  Add({.kind = K::kTmpfs,
       .target = in_new_root("/tmp"),
       .data = tmpfs_data,
       .flags = MS_NOSUID | MS_NODEV});
  if (!options.workspace_dir) {
    Add({.kind = K::kTmpfs,
         .target = in_new_root("/workspace"),
         .data = Keep(absl::StrCat("mode=0755,size=", options.tmpfs_bytes)),
         .flags = MS_NOSUID | MS_NODEV});
  }
}

bool MountPlan::UseDetachedSysfs(int fd) {
  if (fd < 0 || inherited_fds_.size() >= kMaxTrees) return false;
  for (MountStep& step : steps_) {
    if (step.kind != MountStep::Kind::kSysfs) continue;
    step.fd = fd;
    inherited_fds_.push_back(fd);
    return true;
  }
  return false;
}

bool MountPlan::Execute(int error_fd) const {
  ChildMounter mounter(error_fd);
  for (const MountStep& step : steps_) {
    if (!mounter.Run(step)) return false;
  }
  return true;
}

}  // namespace moat::sandbox
