#include "sandbox/idmap.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "sandbox/userns.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {}  // namespace

absl::StatusOr<UniqueFd> MakeMappingUserNamespace(uid_t from_uid, gid_t from_gid, uid_t to_uid,
                                                  gid_t to_gid) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoStatus("idmap: pipe");
  UniqueFd read_end(pipefd[0]), write_end(pipefd[1]);
  struct clone_args args = {};
  args.flags = CLONE_NEWUSER;
  args.exit_signal = SIGCHLD;
  long pid = ::syscall(SYS_clone3, &args, sizeof(args));
  if (pid < 0) return ErrnoStatus("idmap: clone3(CLONE_NEWUSER)");
  if (pid == 0) {
    // Only holds the namespace until the parent has opened it; never touches anything else.
    // Its copy of the write end must go, or the parent's close would never read as EOF here.
    ::close(write_end.get());
    char c;
    ssize_t unused = ::read(read_end.get(), &c, 1);
    (void)unused;
    ::_exit(0);
  }
  auto reap = absl::MakeCleanup([&] {
    write_end.reset();  // EOF releases the child
    while (::waitpid(static_cast<pid_t>(pid), nullptr, 0) < 0 && errno == EINTR) {
    }
  });
  std::string proc = absl::StrCat("/proc/", pid);
  RETURN_IF_ERROR(WriteOneIdMaps(static_cast<pid_t>(pid), from_uid, from_gid, to_uid, to_gid,
                                 /*deny_setgroups=*/true));
  int fd = ::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("idmap: open \"", proc, "/ns/user\""));
  return UniqueFd(fd);
}

absl::Status PrepareTree(int tree_fd, int userns_fd, const std::string& path) {
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  // Out of the host's peer group: a clone of a shared mount (under systemd "/" is shared) stays
  // its peer, and a mount the sandbox later makes on top of it (the read-only bind over it)
  // would propagate back to the host's path, stacking there and doubling with every run.
  attr.propagation = MS_PRIVATE;
  if (userns_fd >= 0) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<uint64_t>(userns_fd);
  }
  if (::mount_setattr(tree_fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) == 0) {
    return absl::OkStatus();
  }
  int e = errno;
  if (userns_fd < 0) return ErrnoStatus(absl::StrCat("make \"", path, "\" nosuid,nodev"), e);
  return absl::Status(
      ErrnoToCode(e),
      absl::StrCat("\"", path,
                   "\" belongs to another user than the sandbox's; showing it as the "
                   "sandbox's own needs an idmapped mount, which failed: ",
                   strerror(e),
                   " (use a directory owned by the sandbox's host uid, or a file system with "
                   "idmapped mounts: ext4, xfs, btrfs, tmpfs)"));
}

}  // namespace moat::sandbox
