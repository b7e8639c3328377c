#include "node-agent/backend/workspace_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "node-agent/backend/workspace_path.h"
#include "util/errno_status.h"
#include "util/remove_tree.h"
#include "util/status_macros.h"

namespace moat::agent {
namespace {

constexpr mode_t kDirectoryMode = 0755;

// "a/b/c" -> {"a/b", "c"}; "c" -> {"", "c"}.
std::pair<std::string, std::string> SplitParent(absl::string_view rel) {
  size_t slash = rel.rfind('/');
  if (slash == absl::string_view::npos) return {"", std::string(rel)};
  return {std::string(rel.substr(0, slash)), std::string(rel.substr(slash + 1))};
}

// The contract's code for an errno, where it differs from the generic mapping.
absl::StatusCode FileErrorCode(int errno_value) {
  switch (errno_value) {
    case EISDIR:
    case ENOTEMPTY:
    case EEXIST:
    case ENXIO:  // open() of a socket: not a file
      return absl::StatusCode::kFailedPrecondition;
    case ENOSPC:
    case EDQUOT:
      return absl::StatusCode::kResourceExhausted;
    case ELOOP:  // too many symlinks
    case EXDEV:  // a mount point inside the workspace: refused by RESOLVE_NO_XDEV
    case ENAMETOOLONG:
      return absl::StatusCode::kInvalidArgument;
    default:
      return ErrnoToCode(errno_value);
  }
}

// Temporary names of uploads: unique per process; O_EXCL refuses one planted by the sandbox.
std::string TemporaryName() {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(".moat-upload-", ::getpid(), "-", absl::GetCurrentTimeNanos(), "-",
                      counter.fetch_add(1));
}

absl::Status WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::Status(FileErrorCode(errno), std::strerror(errno));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

WorkspaceFiles::WorkspaceFiles(int root, uid_t owner_uid, gid_t owner_gid, std::string display_root)
    : root_(root),
      owner_uid_(owner_uid),
      owner_gid_(owner_gid),
      display_root_(std::move(display_root)) {}

WorkspaceFiles WorkspaceFiles::SandboxRoot(int root, uid_t owner_uid, gid_t owner_gid) {
  WorkspaceFiles files(root, owner_uid, owner_gid, "");
  files.whole_root_ = true;
  return files;
}

absl::StatusOr<std::string> WorkspaceFiles::Relative(absl::string_view path) const {
  return whole_root_ ? SandboxRootRelativePath(path) : WorkspaceRelativePath(path);
}

std::string WorkspaceFiles::Display(absl::string_view rel) const {
  if (rel.empty()) return display_root_.empty() ? "/" : display_root_;
  return absl::StrCat(display_root_, "/", rel);
}

absl::Status WorkspaceFiles::Error(absl::string_view step, absl::string_view rel,
                                   int errno_value) const {
  std::string message = absl::StrCat(step, " \"", Display(rel), "\": ", std::strerror(errno_value));
  if (errno_value == ENOSPC || errno_value == EDQUOT) {
    absl::StrAppend(&message, " (the workspace is full: remove files to make room)");
  }
  return absl::Status(FileErrorCode(errno_value), message);
}

absl::StatusOr<UniqueFd> WorkspaceFiles::Open(absl::string_view rel, int flags) const {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  // The workspace alone stays on its mount; the sandbox's root crosses its own mounts.
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | (whole_root_ ? 0 : RESOLVE_NO_XDEV);
  std::string path = rel.empty() ? "." : std::string(rel);
  // EAGAIN: a rename elsewhere in the workspace raced the lookup (the kernel refuses to guess
  // for RESOLVE_IN_ROOT); trying again is what the kernel asks for.
  for (int tries = 0;; ++tries) {
    int fd = static_cast<int>(::syscall(SYS_openat2, root_, path.c_str(), &how, sizeof(how)));
    if (fd >= 0) return UniqueFd(fd);
    if ((errno == EAGAIN || errno == EINTR) && tries < 16) continue;
    if (errno == EAGAIN) {
      return absl::UnavailableError(
          absl::StrCat("look up \"", Display(rel), "\": the workspace keeps changing; retry"));
    }
    return Error("open", rel, errno);
  }
}

absl::StatusOr<OpenedFile> WorkspaceFiles::OpenRead(absl::string_view path) {
  ASSIGN_OR_RETURN(std::string rel, Relative(path));
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; O_NOCTTY: a terminal
  // must never become ours.
  ASSIGN_OR_RETURN(UniqueFd fd, Open(rel, O_RDONLY | O_NONBLOCK | O_NOCTTY));
  ASSIGN_OR_RETURN(FileInfo info, StatAt(fd.get(), "", rel));
  if (info.type == FileType::kDirectory) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", Display(rel), "\" is a directory; list it instead of reading it"));
  }
  if (info.type != FileType::kFile) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", Display(rel),
                     "\" is not a regular file (a FIFO, socket or device); only regular "
                     "files can be read"));
  }
  return OpenedFile{std::move(fd), std::move(info)};
}

absl::StatusOr<std::string> ReadAt(int fd, uint64_t offset, uint64_t length) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus("inspect the open file");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (offset >= size) return std::string();
  std::string data(std::min(length, size - offset), '\0');
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        ::pread(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read the open file");
    }
    if (n == 0) break;  // truncated since fstat
    done += static_cast<size_t>(n);
  }
  data.resize(done);
  return data;
}

absl::StatusOr<std::string> WorkspaceFiles::ReadFile(absl::string_view path, uint64_t offset,
                                                     uint64_t length) {
  ASSIGN_OR_RETURN(OpenedFile file, OpenRead(path));
  return ReadAt(file.fd.get(), offset, length);
}

absl::StatusOr<UniqueFd> WorkspaceFiles::MakeDirectories(absl::string_view rel) const {
  ASSIGN_OR_RETURN(UniqueFd current, Open("", O_PATH | O_DIRECTORY));
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(rel, '/', absl::SkipEmpty())) {
    prefix = prefix.empty() ? std::string(part) : absl::StrCat(prefix, "/", part);
    std::string name(part);
    // Each prefix is looked up from the root, so a symlinked component resolves as it would in
    // the sandbox; a missing one is made in the directory found for the prefix before it.
    for (int tries = 0;; ++tries) {
      absl::StatusOr<UniqueFd> next = Open(prefix, O_PATH | O_DIRECTORY);
      if (next.ok()) {
        current = *std::move(next);
        break;
      }
      if (!absl::IsNotFound(next.status())) return next.status();
      if (::mkdirat(current.get(), name.c_str(), kDirectoryMode) == 0) {
        // Opened without following: if the sandbox swapped it already, we fail or chown one of
        // its own directories, never anything else.
        int made =
            ::openat(current.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (made < 0) return Error("open the new directory", prefix, errno);
        UniqueFd made_fd(made);
        if (::fchown(made, owner_uid_, owner_gid_) != 0) return Error("chown", prefix, errno);
        if (::fchmod(made, kDirectoryMode) != 0) return Error("chmod", prefix, errno);  // umask
        current = std::move(made_fd);
        break;
      }
      if (errno == ENOTDIR || errno == ENOENT) {
        // ENOTDIR from the lookup is reported as NotFound; here it means a file is in the way.
        return absl::FailedPreconditionError(
            absl::StrCat("\"", Display(prefix), "\" is not a directory"));
      }
      if (errno != EEXIST) return Error("make directory", prefix, errno);
      struct stat st;
      if (::fstatat(current.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
        return absl::FailedPreconditionError(
            absl::StrCat("\"", Display(prefix), "\" is a file, not a directory"));
      }
      if (tries == 2) {
        // Exists, yet the lookup says it is missing: a symlink to nowhere.
        return absl::FailedPreconditionError(absl::StrCat(
            "\"", Display(prefix), "\" exists and is not a directory (a dangling symlink?)"));
      }
    }
  }
  return current;
}

absl::Status WorkspaceFiles::MakeDirectory(absl::string_view path) {
  ASSIGN_OR_RETURN(std::string rel, Relative(path));
  absl::StatusOr<UniqueFd> made = MakeDirectories(rel);
  if (!made.ok() && absl::IsNotFound(made.status())) {
    // A file as a middle component makes the lookup fail with ENOTDIR (NotFound); to the
    // caller that is a file in the way.
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make directory \"", Display(rel), "\": ", made.status().message()));
  }
  return made.status();
}

absl::Status WorkspaceFiles::WriteFile(absl::string_view path, absl::string_view data,
                                       uint32_t mode) {
  ASSIGN_OR_RETURN(std::string rel, Relative(path));
  if (rel.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", Display(""), "\" is a directory; give a file path under it"));
  }
  auto [parent_rel, name] = SplitParent(rel);
  absl::StatusOr<UniqueFd> parent = MakeDirectories(parent_rel);
  if (!parent.ok()) {
    if (absl::IsNotFound(parent.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write \"", Display(rel), "\": ", parent.status().message()));
    }
    return parent.status();
  }
  int dir = parent->get();
  struct stat st;
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", Display(rel), "\" is a directory; remove it first or pick a file name"));
  }
  std::string temp;
  UniqueFd fd;
  for (int tries = 0; !fd.valid(); ++tries) {
    temp = TemporaryName();
    fd.reset(
        ::openat(dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid() && (errno != EEXIST || tries == 8)) return Error("create", rel, errno);
  }
  absl::Status status = WriteAll(fd.get(), data);
  if (!status.ok()) {
    status = absl::Status(
        status.code(),
        absl::StrCat("write \"", Display(rel), "\": ", status.message(),
                     absl::IsResourceExhausted(status) ? " (the workspace is full)" : ""));
  } else if (::fchown(fd.get(), owner_uid_, owner_gid_) != 0) {
    status = Error("chown", rel, errno);
  } else if (::fchmod(fd.get(), mode & 0777) != 0) {  // after fchown, which may clear bits
    status = Error("chmod", rel, errno);
  } else if (::renameat(dir, temp.c_str(), dir, name.c_str()) != 0) {
    // EISDIR: a directory appeared at the name since we looked.
    status = Error("replace", rel, errno);
  }
  if (!status.ok()) ::unlinkat(dir, temp.c_str(), 0);
  return status;
}

absl::StatusOr<FileInfo> WorkspaceFiles::StatAt(int dirfd, const std::string& name,
                                                absl::string_view rel) const {
  struct stat st;
  int flags = AT_SYMLINK_NOFOLLOW | (name.empty() ? AT_EMPTY_PATH : 0);
  if (::fstatat(dirfd, name.c_str(), &st, flags) != 0) return Error("inspect", rel, errno);
  FileInfo info;
  info.path = Display(rel);
  info.is_dir = S_ISDIR(st.st_mode);
  info.type = S_ISDIR(st.st_mode)   ? FileType::kDirectory
              : S_ISREG(st.st_mode) ? FileType::kFile
              : S_ISLNK(st.st_mode) ? FileType::kSymlink
                                    : FileType::kOther;
  info.size = static_cast<uint64_t>(st.st_size);
  info.mode = st.st_mode & 07777;
  info.modified = absl::TimeFromTimespec(st.st_mtim);
  return info;
}

absl::StatusOr<FileInfo> WorkspaceFiles::Stat(absl::string_view path) {
  ASSIGN_OR_RETURN(std::string rel, Relative(path));
  if (rel.empty()) return StatAt(root_, "", rel);
  absl::StatusOr<UniqueFd> target = Open(rel, O_PATH);  // follows links, inside only
  if (target.ok()) return StatAt(target->get(), "", rel);
  if (!absl::IsNotFound(target.status())) return target.status();
  // Not there, or a symlink that leads nowhere inside: then the link itself is described, so
  // that it can be inspected and deleted like any entry a listing shows.
  auto [parent_rel, name] = SplitParent(rel);
  absl::StatusOr<UniqueFd> parent = Open(parent_rel, O_PATH | O_DIRECTORY);
  if (!parent.ok()) return target.status();
  absl::StatusOr<FileInfo> link = StatAt(parent->get(), name, rel);
  if (!link.ok() || link->type != FileType::kSymlink) return target.status();
  return link;
}

absl::StatusOr<std::vector<FileInfo>> WorkspaceFiles::List(absl::string_view path) {
  ASSIGN_OR_RETURN(std::string rel, Relative(path));
  // O_PATH first: tells "not a directory" (FailedPrecondition) from "not there" (NotFound)
  // without opening whatever the entry is.
  ASSIGN_OR_RETURN(UniqueFd target, Open(rel, O_PATH));
  struct stat st;
  if (::fstat(target.get(), &st) != 0) return Error("inspect", rel, errno);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", Display(rel), "\" is not a directory; stat or download it instead"));
  }
  int fd = ::openat(target.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error("open", rel, errno);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    absl::Status error = Error("list", rel, errno);
    ::close(fd);
    return error;
  }
  std::vector<FileInfo> entries;
  absl::Status status;
  while (true) {
    errno = 0;
    struct dirent* entry = ::readdir(dir);
    if (entry == nullptr) {
      if (errno != 0) status = Error("list", rel, errno);
      break;
    }
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    std::string entry_rel = rel.empty() ? name : absl::StrCat(rel, "/", name);
    absl::StatusOr<FileInfo> info = StatAt(::dirfd(dir), name, entry_rel);
    if (info.ok()) {
      entries.push_back(*std::move(info));
    } else if (!absl::IsNotFound(info.status())) {  // NotFound: removed since readdir
      status = info.status();
      break;
    }
  }
  ::closedir(dir);
  RETURN_IF_ERROR(status);
  std::sort(entries.begin(), entries.end(),
            [](const FileInfo& a, const FileInfo& b) { return a.path < b.path; });
  return entries;
}

absl::Status WorkspaceFiles::Move(absl::string_view from, absl::string_view to) {
  ASSIGN_OR_RETURN(std::string from_rel, Relative(from));
  ASSIGN_OR_RETURN(std::string to_rel, Relative(to));
  if (from_rel.empty() || to_rel.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot move \"", Display(""), "\" itself or replace it"));
  }
  if (absl::StartsWith(to_rel, absl::StrCat(from_rel, "/"))) {
    return absl::InvalidArgumentError(absl::StrCat("cannot move \"", Display(from_rel),
                                                   "\" into itself (\"", Display(to_rel), "\")"));
  }
  auto [from_parent_rel, from_name] = SplitParent(from_rel);
  auto [to_parent_rel, to_name] = SplitParent(to_rel);
  ASSIGN_OR_RETURN(UniqueFd from_parent, Open(from_parent_rel, O_PATH | O_DIRECTORY));
  ASSIGN_OR_RETURN(UniqueFd to_parent, Open(to_parent_rel, O_PATH | O_DIRECTORY));
  struct stat st;
  if (::fstatat(from_parent.get(), from_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Error("move", from_rel, errno);
  }
  if (from_rel == to_rel) return absl::OkStatus();
  bool from_is_dir = S_ISDIR(st.st_mode);
  if (::fstatat(to_parent.get(), to_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "\"", Display(to_rel), "\" is a directory; give the full new path of the entry"));
    }
    if (from_is_dir) {
      return absl::FailedPreconditionError(absl::StrCat(
          "\"", Display(to_rel), "\" is a file; a directory cannot replace it: remove it first"));
    }
  }
  if (::renameat(from_parent.get(), from_name.c_str(), to_parent.get(), to_name.c_str()) != 0) {
    int saved = errno;
    if (saved == EINVAL) {  // into itself, through a symlink the lexical check cannot see
      return absl::InvalidArgumentError(absl::StrCat("cannot move \"", Display(from_rel),
                                                     "\" into itself (\"", Display(to_rel), "\")"));
    }
    if (saved == ENOTDIR) {  // raced: the types changed since we looked
      return absl::FailedPreconditionError(absl::StrCat(
          "move \"", Display(from_rel), "\" to \"", Display(to_rel), "\": ", std::strerror(saved)));
    }
    return Error(absl::StrCat("move to \"", Display(to_rel), "\" from"), from_rel, saved);
  }
  return absl::OkStatus();
}

absl::Status WorkspaceFiles::SetMode(absl::string_view path, uint32_t mode) {
  ASSIGN_OR_RETURN(std::string rel, Relative(path));
  ASSIGN_OR_RETURN(UniqueFd target, Open(rel, O_PATH));
  // fchmod refuses an O_PATH descriptor; its /proc/self/fd link names exactly the inode it holds
  // (resolved already, inside the root), and opening it for reading would need read permission.
  const std::string via = absl::StrCat("/proc/self/fd/", target.get());
  if (::chmod(via.c_str(), mode & 0777) != 0) return Error("chmod", rel, errno);
  return absl::OkStatus();
}

absl::Status WorkspaceFiles::Remove(absl::string_view path) {
  ASSIGN_OR_RETURN(std::string rel, Relative(path));
  if (rel.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("refusing to remove \"", Display(""), "\" itself; remove its entries"));
  }
  auto [parent_rel, name] = SplitParent(rel);
  ASSIGN_OR_RETURN(UniqueFd parent, Open(parent_rel, O_PATH | O_DIRECTORY));
  absl::Status status = RemoveTreeAt(parent.get(), name.c_str());
  if (status.ok()) return status;
  if (absl::IsNotFound(status)) {
    return absl::NotFoundError(absl::StrCat("remove \"", Display(rel), "\": no such file"));
  }
  return absl::Status(status.code(),
                      absl::StrCat("remove \"", Display(rel), "\": ", status.message()));
}

}  // namespace moat::agent
