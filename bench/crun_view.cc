#include "bench/crun_view.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::bench {
namespace {

// From <linux/magic.h>, spelled out to keep that header's clashes with <sys/mount.h> away.
constexpr long kTmpfsMagic = 0x01021994;
constexpr long kCgroup2Magic = 0x63677270;

constexpr char kUnifiedMount[] = "/sys/fs/cgroup/unified";

absl::StatusOr<long> FsType(const std::string& path) {
  struct statfs st;
  if (::statfs(path.c_str(), &st) != 0) return ErrnoStatus(absl::StrCat("statfs \"", path, "\""));
  return static_cast<long>(st.f_type);
}

// The steps that run inside the new namespace. The caller returns to its own namespace whatever
// happens here.
absl::Status ShapeView(const std::string& rootfs_dir, bool hide_unified,
                       std::vector<std::string>& notes) {
  // Private first, so that nothing done here propagates back to the host's mounts.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return ErrnoStatus("make the mounts of crun's namespace private (mount --make-rprivate /)");
  }
  if (hide_unified) {
    if (::umount2(kUnifiedMount, MNT_DETACH) != 0) {
      return ErrnoStatus(absl::StrCat("unmount \"", kUnifiedMount, "\" in crun's namespace"));
    }
    notes.push_back(absl::StrCat(
        "crun 1.8.1 refuses this host's hybrid cgroups (cgroup2 at ", kUnifiedMount,
        " has controllers) whatever --cgroup-manager says; crun runs in a private mount "
        "namespace where that cgroup2 mount is unmounted, so it sees and uses plain cgroup v1"));
  }
  if (::mount("/", rootfs_dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    return ErrnoStatus(absl::StrCat("bind the host root on \"", rootfs_dir, "\""));
  }
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_RDONLY;
  if (::mount_setattr(AT_FDCWD, rootfs_dir.c_str(), AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
    return ErrnoStatus(absl::StrCat("make \"", rootfs_dir, "\" read-only (mount_setattr)"));
  }
  notes.push_back(absl::StrCat("crun's rootfs is the host root, bound recursively read-only at \"",
                               rootfs_dir, "\" in that namespace (prepared once, not timed)"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CgroupHost> DetectCgroupHost(const std::string& root) {
  CgroupHost host;
  ASSIGN_OR_RETURN(const long root_type, FsType(root));
  if (root_type == kCgroup2Magic) {
    host.layout = CgroupLayout::kUnified;
    return host;
  }
  if (root_type != kTmpfsMagic) {
    return absl::FailedPreconditionError(absl::StrCat(
        "\"", root, "\" is neither cgroup2 nor a tmpfs of cgroup v1 hierarchies; mount cgroups"));
  }
  const std::string unified = absl::StrCat(root, "/unified");
  absl::StatusOr<long> unified_type = FsType(unified);
  if (!unified_type.ok() || *unified_type != kCgroup2Magic) return host;  // legacy
  host.layout = CgroupLayout::kHybrid;
  std::ifstream controllers(absl::StrCat(unified, "/cgroup.controllers"));
  std::stringstream text;
  text << controllers.rdbuf();
  host.unified_controllers = std::string(absl::StripAsciiWhitespace(text.str()));
  return host;
}

bool CrunRefusesCgroups(const CgroupHost& host) {
  return host.layout == CgroupLayout::kHybrid && !host.unified_controllers.empty();
}

absl::StatusOr<CrunView> PrepareCrunView(const std::string& rootfs_dir) {
  if (::geteuid() != 0) {
    return absl::PermissionDeniedError(
        "preparing crun's mount namespace needs root (the bench runs crun as root); run "
        "bench/run.sh "
        "as root");
  }
  ASSIGN_OR_RETURN(const CgroupHost cgroups, DetectCgroupHost());
  UniqueFd home(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  if (!home) return ErrnoStatus("open \"/proc/self/ns/mnt\"");
  UniqueFd cwd(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!cwd) return ErrnoStatus("open the working directory");

  if (::unshare(CLONE_NEWNS) != 0) {
    return ErrnoStatus("unshare a mount namespace for crun (needs root and a single thread)");
  }
  CrunView view;
  absl::Status shaped = ShapeView(rootfs_dir, CrunRefusesCgroups(cgroups), view.notes);
  if (shaped.ok()) {
    view.mount_ns.reset(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
    if (!view.mount_ns) shaped = ErrnoStatus("open crun's \"/proc/self/ns/mnt\"");
  }
  // Back home in every case: the rest of the bench must not run in crun's view.
  if (::setns(home.get(), CLONE_NEWNS) != 0) {
    return ErrnoStatus("setns back to the bench's own mount namespace");
  }
  if (::fchdir(cwd.get()) != 0) return ErrnoStatus("restore the working directory");
  RETURN_IF_ERROR(shaped);
  return view;
}

}  // namespace moat::bench
