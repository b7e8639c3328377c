#include "util/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/errno_status.h"
#include "util/unique_fd.h"

namespace moat {
namespace {

// Passes in which nothing was moved up but the top is still not empty: something is writing
// into the tree while we remove it. A few retries absorb a race; then we give up and say so.
constexpr int kRaceRetries = 3;
// Passes in all; each one removes kMaxOpenLevels - 1 levels of depth at least, so this bounds the
// depth we remove (about 8 million levels) and the time an adversary can keep us busy.
constexpr int kMaxPasses = 1 << 16;

// Opens the directory `name` right below `parent` without following a symlink or crossing a
// mount. Fails with ELOOP or ENOTDIR if `name` is not (or no longer) a directory, EXDEV if it is
// a mount point.
int OpenLevel(int parent, const char* name) {
  struct open_how how = {};
  how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  int fd;
  int tries = 0;
  do {
    fd = static_cast<int>(::syscall(SYS_openat2, parent, name, &how, sizeof(how)));
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN) && ++tries < 16);
  return fd;
}

struct Level {
  DIR* dir;          // Owns the level's descriptor.
  std::string name;  // Its name in the level above (empty for the top).
};

// Removes what is inside one directory tree, level by level, without recursion.
class TreeEmptier {
 public:
  TreeEmptier(int top, absl::string_view top_name) : top_(top), top_name_(top_name) {}

  // One pass over the tree. Returns the first error other than a directory found not empty
  // (a later pass retries those). Sets `moved_up` if subtrees too deep to hold open were moved
  // into the top directory: another pass must remove them.
  absl::Status Pass(bool& moved_up) {
    moved_up = false;
    error_ = absl::OkStatus();
    int fd = ::openat(top_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(absl::StrCat("open \"", top_name_, "\" to remove it"));
    DIR* top = ::fdopendir(fd);
    if (top == nullptr) {
      int saved = errno;
      ::close(fd);
      return ErrnoStatus(absl::StrCat("read \"", top_name_, "\" to remove it"), saved);
    }
    stack_.push_back({top, ""});
    while (!stack_.empty()) {
      errno = 0;
      struct dirent* entry = ::readdir(stack_.back().dir);
      if (entry == nullptr) {
        if (errno != 0) Note(absl::StrCat("read \"", Path(""), "\""), errno);
        LeaveLevel();
        continue;
      }
      if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
      RemoveEntry(entry->d_name, entry->d_type, moved_up);
    }
    return error_;
  }

 private:
  void RemoveEntry(const char* name, unsigned char type, bool& moved_up) {
    int parent = ::dirfd(stack_.back().dir);
    bool is_dir = type == DT_DIR;
    if (type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;  // gone already
      is_dir = S_ISDIR(st.st_mode);
    }
    if (!is_dir) {
      // EISDIR: swapped for a directory since readdir; the next pass takes it.
      if (::unlinkat(parent, name, 0) != 0 && errno != ENOENT && errno != EISDIR) {
        Note(absl::StrCat("remove \"", Path(name), "\""), errno);
      }
      return;
    }
    if (stack_.size() >= static_cast<size_t>(kMaxOpenLevels)) {
      MoveUp(parent, name);
      moved_up = true;
      return;
    }
    int fd = OpenLevel(parent, name);
    if (fd < 0) {
      if (errno == ELOOP || errno == ENOTDIR) {
        // Swapped for a symlink or a file since readdir: remove the link itself.
        if (::unlinkat(parent, name, 0) != 0 && errno != ENOENT) {
          Note(absl::StrCat("remove \"", Path(name), "\""), errno);
        }
      } else if (errno == EXDEV) {
        if (error_.ok()) {
          error_ = absl::FailedPreconditionError(absl::StrCat(
              "\"", Path(name), "\" is a mount point; it was left in place: unmount it first"));
        }
      } else if (errno != ENOENT) {
        Note(absl::StrCat("open \"", Path(name), "\" to remove it"), errno);
      }
      return;
    }
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      Note(absl::StrCat("read \"", Path(name), "\""), errno);
      ::close(fd);
      return;
    }
    stack_.push_back({dir, name});
  }

  // Closes the level just read to its end and removes its (now empty) directory.
  void LeaveLevel() {
    std::string name = std::move(stack_.back().name);
    ::closedir(stack_.back().dir);
    stack_.pop_back();
    if (stack_.empty()) return;  // the top itself: the caller removes it
    int parent = ::dirfd(stack_.back().dir);
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT &&
        errno != ENOTEMPTY) {
      Note(absl::StrCat("remove directory \"", Path(name), "\""), errno);
    }
  }

  // Renames a subtree too deep to hold open into the top directory, where a later pass removes
  // it. Same mount (we never crossed one), so rename works; RENAME_NOREPLACE never clobbers.
  void MoveUp(int parent, const char* name) {
    for (int tries = 0; tries < 100; ++tries) {
      std::string target = absl::StrCat(".moat-remove-", ::getpid(), "-", ++moved_);
      if (::renameat2(parent, name, top_, target.c_str(), RENAME_NOREPLACE) == 0) return;
      if (errno != EEXIST) break;
    }
    if (errno != ENOENT) Note(absl::StrCat("move deep directory \"", Path(name), "\" up"), errno);
  }

  std::string Path(absl::string_view name) const {
    std::vector<absl::string_view> parts = {top_name_};
    for (size_t i = 1; i < stack_.size(); ++i) parts.push_back(stack_[i].name);
    if (!name.empty()) parts.push_back(name);
    return absl::StrJoin(parts, "/");
  }

  void Note(absl::string_view what, int errno_value) {
    if (error_.ok()) error_ = ErrnoStatus(what, errno_value);
  }

  const int top_;
  const std::string top_name_;
  std::vector<Level> stack_;
  absl::Status error_;
  uint64_t moved_ = 0;
};

}  // namespace

absl::Status RemoveTreeAt(int dirfd, const char* name) {
  // The entry may be swapped between a file and a directory while we look: a few tries.
  UniqueFd top;
  for (int tries = 0; !top.valid(); ++tries) {
    if (::unlinkat(dirfd, name, 0) == 0) return absl::OkStatus();
    if (errno != EISDIR || tries == kRaceRetries) {
      return ErrnoStatus(absl::StrCat("remove \"", name, "\""));
    }
    top.reset(OpenLevel(dirfd, name));
    if (top.valid() || errno == ELOOP || errno == ENOTDIR || errno == ENOENT) continue;
    if (errno == EXDEV) {
      return absl::FailedPreconditionError(
          absl::StrCat("\"", name, "\" is a mount point; unmount it before removing it"));
    }
    return ErrnoStatus(absl::StrCat("open \"", name, "\" to remove it"));
  }
  TreeEmptier emptier(top.get(), name);
  int stuck_passes = 0;
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    bool moved_up = false;
    absl::Status status = emptier.Pass(moved_up);
    if (::unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) return absl::OkStatus();
    if (errno != ENOTEMPTY) return ErrnoStatus(absl::StrCat("remove directory \"", name, "\""));
    if (moved_up) continue;
    if (!status.ok()) return status;
    if (++stuck_passes > kRaceRetries) {
      return absl::FailedPreconditionError(
          absl::StrCat("directory \"", name, "\" is still not empty after ", stuck_passes,
                       " passes: something keeps writing into it; stop it and retry"));
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("directory \"", name, "\" is too deep to remove (over ",
                   int64_t{kMaxPasses} * (kMaxOpenLevels - 1), " levels)"));
}

}  // namespace moat
