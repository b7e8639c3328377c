#include "sandbox/netns/netns_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

// The entries of the directory `dir_fd` (freshly opened: read from its start), but for "." and
// "..". getdents64 on the descriptor itself: no second open, as opendir would need.
std::vector<std::string> ListEntries(int dir_fd) {
  std::vector<std::string> names;
  alignas(struct dirent64) char buf[4096];
  for (;;) {
    const ssize_t n = ::getdents64(dir_fd, buf, sizeof(buf));
    if (n <= 0) return names;
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const struct dirent64*>(buf + at);
      at += e->d_reclen;
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
  }
}

// Whether `name` under `dir_fd` ("": dir_fd itself) is the root of a mount.
bool IsMountRoot(int dir_fd, const char* name) {
  struct statx stx;
  const int flags = AT_SYMLINK_NOFOLLOW | (*name == '\0' ? AT_EMPTY_PATH : 0);
  return ::statx(dir_fd, name, flags, STATX_BASIC_STATS, &stx) == 0 &&
         (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0 &&
         (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
}

// Whether `fd` is a network namespace owned by this process's user namespace (a namespace some
// other user namespace owns could be configured from there).
bool IsOurNetworkNamespace(int fd) {
  if (::ioctl(fd, NS_GET_NSTYPE) != CLONE_NEWNET) return false;
  UniqueFd owner(::ioctl(fd, NS_GET_USERNS));
  struct stat theirs, ours;
  return owner && ::fstat(owner.get(), &theirs) == 0 && ::stat("/proc/self/ns/user", &ours) == 0 &&
         theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev;
}

// The pid in an entry's name ("<pid>-<random>"), or 0.
pid_t MakerOf(const std::string& name) {
  int pid = 0;
  const size_t dash = name.find('-');
  if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(0, dash), &pid)) return 0;
  return pid;
}

}  // namespace

absl::StatusOr<UniqueFd> NetnsPool::Take() {
  UniqueFd dir(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!dir) return absl::NotFoundError(absl::StrCat("no network namespace pool at ", dir_));
  for (const std::string& name : ListEntries(dir.get())) {
    UniqueFd ns(::openat(dir.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!ns || !IsOurNetworkNamespace(ns.get())) continue;
    // The claim: only one umount of this mount can succeed; a loser finds no mount here.
    const std::string path = absl::StrCat(dir_, "/", name);
    if (::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) continue;
    // Removing the entry fails if a second mount was stacked under ours (which no moat makes):
    // then the namespace might be handed out twice, so it is not used.
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0) continue;
    return ns;
  }
  return absl::NotFoundError(absl::StrCat("no network namespace waits in ", dir_));
}

absl::StatusOr<UniqueFd> NetnsPool::Prepare() {
  const size_t slash = dir_.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string parent = dir_.substr(0, slash);
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(absl::StrCat("network namespace pool: create ", parent));
    }
  }
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("network namespace pool: create ", dir_));
  }
  UniqueFd dir(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!dir) return ErrnoStatus(absl::StrCat("network namespace pool: open ", dir_));
  struct stat st;
  if (::fstat(dir.get(), &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "network namespace pool: ", dir_, " must be owned by uid ", ::geteuid(),
        " and closed to everyone else (mode 0700); remove it and moat makes it again"));
  }
  // Make it a private mount of itself, once (a lock keeps two first runs from both binding it).
  // Private every time: a process that died between the two steps left it as the parent's.
  if (::flock(dir.get(), LOCK_EX) != 0) return ErrnoStatus("network namespace pool: lock");
  const bool bind = !IsMountRoot(AT_FDCWD, dir_.c_str());
  absl::Status made = absl::OkStatus();
  if ((bind && ::mount(dir_.c_str(), dir_.c_str(), nullptr, MS_BIND, nullptr) != 0) ||
      ::mount(nullptr, dir_.c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
    made = ErrnoStatus(absl::StrCat("network namespace pool: make ", dir_, " a private mount"));
  }
  ::flock(dir.get(), LOCK_UN);
  RETURN_IF_ERROR(made);
  if (!bind) return dir;
  // Just bound: the descriptor still shows the directory under the new mount.
  UniqueFd through(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!through) return ErrnoStatus(absl::StrCat("network namespace pool: open ", dir_));
  return through;
}

absl::StatusOr<bool> NetnsPool::Add(int netns_fd) {
  if (!IsOurNetworkNamespace(netns_fd)) {
    return absl::InvalidArgumentError("network namespace pool: not a network namespace of ours");
  }
  ASSIGN_OR_RETURN(UniqueFd dir, Prepare());
  int waiting = 0;
  for (const std::string& name : ListEntries(dir.get())) {
    if (IsMountRoot(dir.get(), name.c_str())) {
      ++waiting;
      continue;
    }
    // An empty entry: its maker died between creating and mounting it, or a taker between
    // unmounting and removing it. Only a dead maker's entries can be removed safely.
    const pid_t maker = MakerOf(name);
    if (maker > 0 && ::kill(maker, 0) != 0 && errno == ESRCH) {
      ::unlinkat(dir.get(), name.c_str(), 0);
    }
  }
  if (waiting >= capacity_) return false;

  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) {
    return ErrnoStatus("network namespace pool: getrandom");
  }
  const std::string name = absl::StrFormat("%d-%016x", ::getpid(), nonce);
  UniqueFd file(::openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!file) return ErrnoStatus(absl::StrCat("network namespace pool: create ", name));
  file.reset();
  const std::string path = absl::StrCat(dir_, "/", name);
  const std::string source = absl::StrCat("/proc/self/fd/", netns_fd);
  if (::mount(source.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    absl::Status failed = ErrnoStatus(absl::StrCat("network namespace pool: bind ", path));
    ::unlinkat(dir.get(), name.c_str(), 0);
    return failed;
  }
  return true;
}

}  // namespace moat::sandbox
