#include "sandbox/creation_guard.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/policy/policy.h"
#include "sandbox/seccomp/seccomp_notify.h"
#include "sandbox/seccomp/seccomp_policy.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::sandbox {

// What the guard must know of the calling thread, from /proc/<tid>/status.
struct CreationGuard::Caller {
  uid_t fsuid = 0;
  gid_t fsgid = 0;
  std::vector<gid_t> groups;
  mode_t umask = 022;
  pid_t tgid_inside = 0;  // its process and thread ids in its own pid namespace
  pid_t tid_inside = 0;
};

namespace {

constexpr int kMaxSymlinkHops = 40;  // the kernel's MAXSYMLINKS
constexpr size_t kMaxViolations = 64;
// What the sandbox is told when it tries to make a protected name: the same as for writing one
// that exists (a read-only bind).
constexpr int kRefused = EROFS;

using Caller = CreationGuard::Caller;

// The last of the whitespace-separated numbers of a status line ("NStgid:\t4711\t2" -> 2) or the
// field `index` of it ("Uid:\treal\teffective\tsaved\tfs").
bool StatusField(absl::string_view line, int index, uint64_t* out) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (fields.size() < 2) return false;
  size_t at = index < 0 ? fields.size() - 1 : static_cast<size_t>(index) + 1;
  return at < fields.size() && absl::SimpleAtoi(fields[at], out);
}

// Returns 0 or an errno.
int ReadCaller(int proc_fd, pid_t tid, Caller* caller) {
  UniqueFd fd(::openat(proc_fd, absl::StrCat(tid, "/status").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno;
  char buf[4096];
  ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return n < 0 ? errno : ESRCH;
  int found = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(buf, n), '\n')) {
    uint64_t v = 0;
    if (absl::StartsWith(line, "Umask:")) {
      std::vector<absl::string_view> f = absl::StrSplit(line, '\t', absl::SkipEmpty());
      unsigned mask = 0;
      if (f.size() == 2 && absl::numbers_internal::safe_strtou32_base(f[1], &mask, 8)) {
        caller->umask = mask & 0777;
      }
    } else if (absl::StartsWith(line, "Uid:") && StatusField(line, 3, &v)) {
      caller->fsuid = static_cast<uid_t>(v);
      ++found;
    } else if (absl::StartsWith(line, "Gid:") && StatusField(line, 3, &v)) {
      caller->fsgid = static_cast<gid_t>(v);
      ++found;
    } else if (absl::StartsWith(line, "Groups:")) {
      caller->groups.clear();
      for (absl::string_view g :
           absl::StrSplit(line.substr(7), absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
        if (absl::SimpleAtoi(g, &v)) caller->groups.push_back(static_cast<gid_t>(v));
      }
    } else if (absl::StartsWith(line, "NStgid:") && StatusField(line, -1, &v)) {
      caller->tgid_inside = static_cast<pid_t>(v);
    } else if (absl::StartsWith(line, "NSpid:") && StatusField(line, -1, &v)) {
      caller->tid_inside = static_cast<pid_t>(v);
    }
  }
  return found == 2 ? 0 : ESRCH;
}

// Reads the NUL-terminated string at `addr` in `pid`'s memory, page by page (a string may end
// just before an unmapped page). Returns 0, EFAULT or ENAMETOOLONG (over PATH_MAX with its NUL).
int ReadString(pid_t pid, uint64_t addr, std::string* out) {
  out->clear();
  constexpr uint64_t kPage = 4096;
  char buf[kPage];
  while (out->size() < PATH_MAX) {
    const size_t want = std::min<uint64_t>(kPage - (addr % kPage), PATH_MAX - out->size());
    struct iovec local = {buf, want};
    struct iovec remote = {reinterpret_cast<void*>(addr), want};
    ssize_t got = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got <= 0) return got < 0 && errno == ESRCH ? ESRCH : EFAULT;
    if (const void* nul = std::memchr(buf, '\0', got)) {
      out->append(buf, static_cast<const char*>(nul) - buf);
      return 0;
    }
    out->append(buf, got);
    addr += got;
  }
  return ENAMETOOLONG;
}

// The guard's thread is outside the sandbox's pid namespace, so the sandbox's /proc cannot say
// who "self" is for it. Paths that name the caller that way are spelled with its pid instead:
// /proc/self, /proc/thread-self, and the /dev links to them (mounts.cc makes those).
std::string SpellSelf(absl::string_view path, const Caller& c) {
  auto starts = [&](absl::string_view prefix) {
    return absl::StartsWith(path, prefix) &&
           (path.size() == prefix.size() || path[prefix.size()] == '/');
  };
  const std::string proc = absl::StrCat("/proc/", c.tgid_inside);
  if (starts("/proc/self")) return absl::StrCat(proc, path.substr(10));
  if (starts("/proc/thread-self")) {
    return absl::StrCat(proc, "/task/", c.tid_inside, path.substr(17));
  }
  if (starts("/dev/fd")) return absl::StrCat(proc, "/fd", path.substr(7));
  if (path == "/dev/stdin") return absl::StrCat(proc, "/fd/0");
  if (path == "/dev/stdout") return absl::StrCat(proc, "/fd/1");
  if (path == "/dev/stderr") return absl::StrCat(proc, "/fd/2");
  return std::string(path);
}

// A path cut before its last component: "a/b/" -> ("a/", "b/"); "b" -> ("", "b"); "/" -> ("/", "").
// `name` keeps its trailing slashes (they matter to the kernel: mkdir "b/" is fine, open "b/"
// with O_CREAT is EISDIR); `bare` is the name without them.
struct Split {
  std::string parent;
  std::string name;
  std::string bare;
};
Split SplitLast(absl::string_view path) {
  size_t end = path.size();
  while (end > 0 && path[end - 1] == '/') --end;
  if (end == 0) return {std::string(path), "", ""};
  size_t slash = path.rfind('/', end - 1);
  if (slash == absl::string_view::npos) {
    return {"", std::string(path), std::string(path.substr(0, end))};
  }
  return {std::string(path.substr(0, slash + 1)), std::string(path.substr(slash + 1)),
          std::string(path.substr(slash + 1, end - slash - 1))};
}

bool Exists(int dir, const std::string& name) {
  struct stat st;
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

bool OnProcfs(int fd) {
  struct statfs fs;
  return ::fstatfs(fd, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
}

// Keeps, of the thread's effective capabilities, those it needs to act for a sandboxed thread:
// reading its memory and /proc entries (CAP_SYS_PTRACE) and taking its ids (CAP_SETUID,
// CAP_SETGID). The file-system capabilities go when the fsuid becomes the caller's.
int NarrowCapabilities() {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return errno;
  const uint64_t keep = (1ull << CAP_SYS_PTRACE) | (1ull << CAP_SETUID) | (1ull << CAP_SETGID);
  const uint64_t permitted = data[0].permitted | (uint64_t{data[1].permitted} << 32);
  if ((permitted & keep) != keep) return EPERM;
  data[0].effective = static_cast<uint32_t>(keep);
  data[1].effective = static_cast<uint32_t>(keep >> 32);
  return ::syscall(SYS_capset, &header, data) == 0 ? 0 : errno;
}

// Takes the caller's file-system ids and groups for this thread only: the raw calls, not glibc's
// wrappers, which would change every thread of the process. setfsuid and setfsgid say nothing
// of failure; asking again (-1 is never valid) returns the id in force.
bool TakeIds(const Caller& caller) {
  // Only when they differ: a rootless guard stands in the sandbox's user namespace, where
  // setgroups is denied (userns.h), and the caller's groups are the guard's own there.
  gid_t own[NGROUPS_MAX];
  const int n = ::getgroups(NGROUPS_MAX, own);
  if (n < 0 || !std::equal(caller.groups.begin(), caller.groups.end(), own, own + n)) {
    if (::syscall(SYS_setgroups, caller.groups.size(), caller.groups.data()) != 0) return false;
  }
  ::syscall(SYS_setfsgid, caller.fsgid);
  if (::syscall(SYS_setfsgid, -1) != static_cast<long>(caller.fsgid)) return false;
  ::syscall(SYS_setfsuid, caller.fsuid);
  return ::syscall(SYS_setfsuid, -1) == static_cast<long>(caller.fsuid);
}

// Whether `pid`'s root is the directory `root` (the one the guard stands in).
bool SameRoot(int proc_fd, pid_t pid, const struct stat& root) {
  UniqueFd fd(::openat(proc_fd, absl::StrCat(pid, "/root").c_str(), O_PATH | O_CLOEXEC));
  struct stat st;
  return fd && ::fstat(fd.get(), &st) == 0 && st.st_dev == root.st_dev && st.st_ino == root.st_ino;
}

}  // namespace

// One notification's work. Runs on the guard's thread only.
class GuardCall {
 public:
  GuardCall(const CreationGuard::Options& options, int proc_fd, int root_fd,
            const SeccompRequest& request, const Caller& caller)
      : options_(options),
        proc_fd_(proc_fd),
        root_fd_(root_fd),
        request_(request),
        caller_(caller) {}

  // Returns the errno to answer (0: `fd_` or success), and sets `refused_` when it refused a
  // protected name.
  int Run(const CreationCall& call) {
    const uint64_t* args = reinterpret_cast<const uint64_t*>(request_.data.args);
    std::string path, old_path;
    if (int e = ReadString(request_.pid, args[call.path], &path)) return e;
    if (call.old_path >= 0) {
      if (int e = ReadString(request_.pid, args[call.old_path], &old_path)) return e;
    }
    const int flags = call.fixed_flags != 0 ? call.fixed_flags
                      : call.flags >= 0     ? static_cast<int>(args[call.flags])
                                            : 0;
    const mode_t mode = call.mode >= 0 ? static_cast<mode_t>(args[call.mode]) : 0;
    path = SpellSelf(path, caller_);

    UniqueFd start;
    if (int e = OpenStart(call.dirfd < 0 ? AT_FDCWD : static_cast<int>(args[call.dirfd]), path,
                          &start)) {
      return e;
    }
    UniqueFd old_start;
    if (call.kind == CreationCall::Kind::kLink || call.kind == CreationCall::Kind::kRename) {
      old_path = SpellSelf(old_path, caller_);
      const int old_dirfd = call.old_dirfd < 0 ? AT_FDCWD : static_cast<int>(args[call.old_dirfd]);
      if (call.kind == CreationCall::Kind::kLink && (flags & AT_EMPTY_PATH) && old_path.empty()) {
        // linkat(fd, "", ..., AT_EMPTY_PATH): the file behind the caller's descriptor, reached
        // through its /proc link (what an unprivileged caller does for O_TMPFILE files).
        old_path = old_dirfd == AT_FDCWD ? absl::StrCat(request_.pid, "/cwd")
                                         : absl::StrCat(request_.pid, "/fd/", old_dirfd);
        old_start.reset(::fcntl(proc_fd_, F_DUPFD_CLOEXEC, 0));
        if (!old_start) return errno;
      } else if (int e = OpenStart(old_dirfd, old_path, &old_start)) {
        return e;
      }
    }
    Split split = SplitLast(path);
    UniqueFd dir;
    if (int e = OpenDir(start.get(), split.parent, &dir)) return e;
    // Everything read from the caller is in hand: make sure it is still the caller that waits.
    if (!SeccompRequestIsValid(options_.listener.get(), request_.id)) return ESRCH;

    // "/" or "dir/..": nothing named to create; the call says what it says for a directory.
    if (split.bare.empty()) split.name = ".";
    switch (call.kind) {
      case CreationCall::Kind::kOpen:
        if (split.bare.empty()) break;
        return Open(std::move(dir), std::move(split), flags, mode);
      case CreationCall::Kind::kRename:
        if (Protected(dir.get(), split.bare)) return Refuse(dir.get(), split.bare);
        if (flags & RENAME_EXCHANGE) {
          Split old_split = SplitLast(old_path);
          UniqueFd old_dir;
          if (int e = OpenDir(old_start.get(), old_split.parent, &old_dir)) return e;
          if (Protected(old_dir.get(), old_split.bare)) {
            return Refuse(old_dir.get(), old_split.bare);
          }
        }
        break;
      default:
        if (Protected(dir.get(), split.bare)) {
          return Exists(dir.get(), split.bare) ? EEXIST : Refuse(dir.get(), split.bare);
        }
        break;
    }
    return Plain(call, dir.get(), split.name, old_start.get(), old_path, flags, mode, args);
  }

  UniqueFd fd_;  // kOpen: the descriptor to install in the caller
  bool cloexec_ = false;
  std::optional<std::string> refused_;  // the protected path it refused to make

 private:
  // The directory a path starts from: the caller's descriptor or cwd for relative paths, the
  // sandbox's root for absolute ones.
  int OpenStart(int dirfd, const std::string& path, UniqueFd* out) {
    if (absl::StartsWith(path, "/")) {
      out->reset(::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0));
      return *out ? 0 : errno;
    }
    if (dirfd != AT_FDCWD && dirfd < 0) return EBADF;
    const std::string link = dirfd == AT_FDCWD ? absl::StrCat(request_.pid, "/cwd")
                                               : absl::StrCat(request_.pid, "/fd/", dirfd);
    out->reset(::openat(proc_fd_, link.c_str(), O_PATH | O_CLOEXEC));
    if (*out) return 0;
    return errno == ENOENT ? EBADF : errno;
  }

  // The directory `parent` names from `start`, resolved by the kernel with the guard's root
  // (the sandbox's) and ids (the caller's): what it would have found for the caller.
  static int OpenDir(int start, const std::string& parent, UniqueFd* out) {
    out->reset(
        ::openat(start, parent.empty() ? "." : parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    return *out ? 0 : errno;
  }

  // The protected path `name` in `dir` would be, quoted, for messages; nullopt if it is not
  // protected.
  std::optional<std::string> Protected(int dir, const std::string& name) const {
    struct stat st;
    if (::fstat(dir, &st) != 0) return std::nullopt;
    for (const ProtectedEntry& e : options_.protected_entries) {
      if (e.dev == st.st_dev && e.ino == st.st_ino && e.name == name) {
        return absl::StrCat("\"", e.path, "\"");
      }
    }
    for (const ProtectedGlob& g : options_.protected_globs) {
      bool here = g.any_directory
                      ? std::find(g.devs.begin(), g.devs.end(), st.st_dev) != g.devs.end()
                      : g.dev == st.st_dev && g.ino == st.st_ino;
      if (here && GlobMatches(g.glob, name)) {
        return absl::StrCat("\"", name, "\" (it matches the denyWrite pattern \"", g.text, "\")");
      }
    }
    return std::nullopt;
  }

  int Refuse(int dir, const std::string& name) {
    refused_ = Protected(dir, name).value_or(absl::StrCat("\"", name, "\""));
    return kRefused;
  }

  // open(..., O_CREAT): as the kernel would, following a symlink in the last component unless
  // O_NOFOLLOW or O_EXCL says not to, each hop checked again.
  int Open(UniqueFd dir, Split split, int flags, mode_t mode) {
    cloexec_ = (flags & O_CLOEXEC) != 0;
    const bool follow = (flags & (O_NOFOLLOW | O_EXCL)) == 0;
    for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
      if (OnProcfs(dir.get())) {
        // Nothing is ever created in /proc; its links to open files (fd/N) must be followed
        // by the kernel, not as text.
        fd_.reset(::openat(dir.get(), split.name.c_str(), (flags & ~O_CREAT) | O_CLOEXEC));
        return fd_ ? 0 : errno;
      }
      if (Protected(dir.get(), split.bare)) {
        if (flags & O_EXCL) {
          return Exists(dir.get(), split.bare) ? EEXIST : Refuse(dir.get(), split.bare);
        }
        // Opened as it is, if it is there (a read-only bind then refuses writing); never made.
        fd_.reset(::openat(dir.get(), split.name.c_str(), (flags & ~O_CREAT) | O_CLOEXEC));
        if (fd_) return 0;
        return errno == ENOENT ? Refuse(dir.get(), split.bare) : errno;
      }
      fd_.reset(::openat(dir.get(), split.name.c_str(),
                         flags | O_CLOEXEC | (follow ? O_NOFOLLOW : 0), mode));
      if (fd_) return 0;
      if (errno != ELOOP || !follow) return errno;
      char target[PATH_MAX];
      ssize_t n = ::readlinkat(dir.get(), split.bare.c_str(), target, sizeof(target) - 1);
      if (n < 0) return ELOOP;
      std::string link = SpellSelf(absl::string_view(target, n), caller_);
      Split next = SplitLast(link);
      UniqueFd next_dir;
      if (int e =
              OpenDir(absl::StartsWith(link, "/") ? root_fd_ : dir.get(), next.parent, &next_dir)) {
        return e;
      }
      if (next.bare.empty()) return EISDIR;
      dir = std::move(next_dir);
      split = std::move(next);
    }
    return ELOOP;
  }

  // The call itself, on the resolved directory.
  int Plain(const CreationCall& call, int dir, const std::string& name, int old_start,
            const std::string& old_path, int flags, mode_t mode, const uint64_t* args) {
    int rc = -1;
    switch (call.kind) {
      case CreationCall::Kind::kOpen:
        fd_.reset(::openat(dir, name.c_str(), flags | O_CLOEXEC, mode));
        cloexec_ = (flags & O_CLOEXEC) != 0;
        return fd_ ? 0 : errno;
      case CreationCall::Kind::kMkdir:
        rc = ::mkdirat(dir, name.c_str(), mode);
        break;
      case CreationCall::Kind::kMknod:
        rc = ::mknodat(dir, name.c_str(), mode, static_cast<dev_t>(args[call.dev]));
        break;
      case CreationCall::Kind::kSymlink:
        rc = ::symlinkat(old_path.c_str(), dir, name.c_str());  // the link's contents, as given
        break;
      case CreationCall::Kind::kLink:
        rc = ::linkat(old_start, old_path.c_str(), dir, name.c_str(),
                      (flags & AT_EMPTY_PATH) ? AT_SYMLINK_FOLLOW : (flags & AT_SYMLINK_FOLLOW));
        break;
      case CreationCall::Kind::kRename:
        rc = static_cast<int>(::syscall(SYS_renameat2, old_start, old_path.c_str(), dir,
                                        name.c_str(), static_cast<unsigned>(flags)));
        break;
    }
    return rc == 0 ? 0 : errno;
  }

  const CreationGuard::Options& options_;
  const int proc_fd_;
  const int root_fd_;
  const SeccompRequest& request_;
  const Caller& caller_;
};

CreationGuard::CreationGuard(Options options) : options_(std::move(options)) {
  for (const CreationCall& call : CreationCalls()) {
    absl::StatusOr<int> nr = SyscallNumber(options_.arch, call.syscall);
    if (nr.ok()) calls_[*nr] = &call;
  }
}

absl::StatusOr<std::unique_ptr<CreationGuard>> CreationGuard::Start(Options options) {
  if (!options.listener) return absl::InvalidArgumentError("creation guard: no listener");
  std::unique_ptr<CreationGuard> guard(new CreationGuard(std::move(options)));
  if (guard->options_.join_user_namespace) {
    RETURN_IF_ERROR(guard->StartProcess());
    return guard;
  }
  guard->thread_ = std::thread([g = guard.get()] { g->Serve(); });
  absl::Status setup;
  {
    absl::MutexLock lock(&guard->mu_);
    guard->mu_.Await(absl::Condition(&guard->ready_));
    setup = guard->setup_;
  }
  if (!setup.ok()) return setup;  // the thread has returned; the destructor joins it
  return guard;
}

CreationGuard::~CreationGuard() { Stop(); }

bool CreationGuard::Takes(const SeccompRequest& request) const {
  if (request.data.arch != AuditArch(options_.arch)) return false;
  auto it = calls_.find(request.data.nr);
  if (it == calls_.end()) return false;
  const CreationCall& call = *it->second;
  const uint64_t* args = reinterpret_cast<const uint64_t*>(request.data.args);
  if (call.mode >= 0 && (args[call.mode] & (S_ISUID | S_ISGID)) != 0) return false;
  return call.flags < 0 || call.kind != CreationCall::Kind::kOpen ||
         (args[call.flags] & O_CREAT) != 0;
}

void CreationGuard::Submit(const SeccompRequest& request) {
  if (options_.join_user_namespace) {
    // The guard process reads these as fast as it answers them; each waits for its caller's
    // answer, so no more are in flight than the sandbox has threads.
    if (sock_) ::send(sock_.get(), &request, sizeof(request), MSG_NOSIGNAL);
    return;
  }
  absl::MutexLock lock(&mu_);
  queue_.push_back(request);
}

std::vector<Violation> CreationGuard::Stop() {
  if (options_.join_user_namespace) return StopProcess();
  if (thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }
  absl::MutexLock lock(&mu_);
  return violations_;
}

absl::Status CreationGuard::SetUp(pid_t root_of, UniqueFd* proc_fd, UniqueFd* root_fd) const {
  if (!*proc_fd) proc_fd->reset(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!*proc_fd) return ErrnoStatus("creation guard: open /proc");
  UniqueFd sandbox_root(::openat(proc_fd->get(), absl::StrCat(root_of, "/root").c_str(),
                                 O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!sandbox_root) return ErrnoStatus("creation guard: open the sandbox's root");
  if (::unshare(CLONE_FS) != 0) return ErrnoStatus("creation guard: unshare(CLONE_FS)");
  if (::fchdir(sandbox_root.get()) != 0 || ::chroot(".") != 0) {
    return ErrnoStatus(
        options_.join_user_namespace
            ? "creation guard: chroot into the sandbox's root (in its user namespace)"
            : "creation guard: chroot into the sandbox's root (needs CAP_SYS_CHROOT)");
  }
  root_fd->reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!*root_fd) return ErrnoStatus("creation guard: open the sandbox's root");
  if (int e = NarrowCapabilities()) {
    return ErrnoStatus("creation guard: keep only CAP_SYS_PTRACE, CAP_SETUID, CAP_SETGID", e);
  }
  return absl::OkStatus();
}

std::optional<std::string> CreationGuard::Handle(const SeccompRequest& request, int proc_fd,
                                                 int root_fd, Caller* current) const {
  const CreationCall& call = *calls_.at(request.data.nr);  // Takes() said so
  Caller caller;
  int error = ReadCaller(proc_fd, request.pid, &caller);
  if (error == 0 && (caller.fsuid != current->fsuid || caller.fsgid != current->fsgid ||
                     caller.groups != current->groups)) {
    if (TakeIds(caller)) {
      *current = caller;
    } else {
      error = EPERM;  // never act with other ids than the caller's
      current->fsuid = static_cast<uid_t>(-1);
    }
  }
  if (error == 0) ::umask(caller.umask);
  GuardCall work(options_, proc_fd, root_fd, request, caller);
  if (error == 0) error = work.Run(call);
  if (error == ESRCH) return std::nullopt;  // the caller is gone: nobody to answer
  const int listener = options_.listener.get();
  if (error == 0 && work.fd_) {
    // NotFound: the caller died meanwhile; the descriptor is ours to close either way.
    AnswerSeccompRequestWithFd(listener, request.id, work.fd_.get(), work.cloexec_).IgnoreError();
  } else {
    AnswerSeccompRequest(listener, request.id, error).IgnoreError();
  }
  if (!work.refused_) return std::nullopt;
  return absl::StrCat("refused to create protected path ", *work.refused_,
                      " (read-only in the sandbox)");
}

void CreationGuard::Record(std::string detail) {
  absl::MutexLock lock(&mu_);
  // Bounded like the supervisor's own list: a sandbox naming new files forever gets 64.
  if (violations_.size() < kMaxViolations &&
      std::none_of(violations_.begin(), violations_.end(),
                   [&](const Violation& v) { return v.detail == detail; })) {
    violations_.push_back(Violation{"filesystem", std::move(detail)});
  }
}

void CreationGuard::Serve() {
  UniqueFd proc_fd, root_fd;
  // The steps that put this thread where the sandbox's names mean what they mean to it; the
  // first that fails is reported to Start(), which then refuses to go on.
  {
    absl::Status status = SetUp(options_.sandbox_pid, &proc_fd, &root_fd);
    absl::MutexLock lock(&mu_);
    setup_ = status;
    ready_ = true;
    if (!status.ok()) return;
  }

  Caller current;  // the ids and umask the thread has now
  current.fsuid = static_cast<uid_t>(-1);
  auto work_or_stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  };
  for (;;) {
    SeccompRequest request;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&work_or_stop));
      if (queue_.empty()) return;  // stopping, and nothing left
      request = queue_.front();
      queue_.pop_front();
    }
    if (std::optional<std::string> refused =
            Handle(request, proc_fd.get(), root_fd.get(), &current)) {
      Record(*std::move(refused));
    }
  }
}

// ---- rootless: the guard as a process in the sandbox's user namespace ----
//
// Its messages to the supervisor, on a SOCK_SEQPACKET pair: first 'R' (ready) or 'E' + the
// setup's error, then 'V' + a refusal's detail per refused creation. The supervisor sends it
// each request, as the raw SeccompRequest, and shuts its end when the sandbox is over.

void CreationGuard::ServeProcess(int sock) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto report = [&](char kind, absl::string_view text) {
    std::string message(1, kind);
    message.append(text.data(), std::min<size_t>(text.size(), 4000));
    ::send(sock, message.data(), message.size(), MSG_NOSIGNAL);
  };
  UniqueFd proc_fd(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)), root_fd;
  if (!proc_fd) {
    report('E', ErrnoStatus("creation guard: open /proc").message());
    ::_exit(0);
  }
  report('R', "");
  // The sandbox's init is not dumpable and has not exec'd (its memory still belongs to the
  // host's user namespace), so only host root may reach its namespaces or its root, by /proc or
  // by pidfd. The callers have exec'd: at the first, the guard joins its user namespace (one
  // thread, as fork left it, so the kernel lets it; the user owns that namespace, so it may),
  // where it holds what the thread guard holds on the host (CAP_SYS_CHROOT, CAP_SYS_PTRACE over
  // the sandbox, CAP_SETUID/SETGID for the callers' ids) and nothing over anything else; enters
  // the caller's root; and then serves only callers with that same root.
  auto enter = [&](pid_t pid) -> absl::Status {
    UniqueFd userns(
        ::openat(proc_fd.get(), absl::StrCat(pid, "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns) return ErrnoStatus("creation guard: open the sandbox's user namespace");
    if (::setns(userns.get(), CLONE_NEWUSER) != 0) {
      return ErrnoStatus("creation guard: join the sandbox's user namespace (setns)");
    }
    return SetUp(pid, &proc_fd, &root_fd);
  };
  bool failed = false;
  struct stat root_st = {};
  Caller current;
  current.fsuid = static_cast<uid_t>(-1);
  for (;;) {
    SeccompRequest request;
    ssize_t n = ::recv(sock, &request, sizeof(request), 0);
    if (n == 0) break;  // the sandbox is over
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n != static_cast<ssize_t>(sizeof(request)) || !calls_.contains(request.data.nr)) {
      continue;
    }
    if (!root_fd && !failed) {
      absl::Status entered = enter(request.pid);
      if (entered.ok() && ::fstat(root_fd.get(), &root_st) != 0) {
        entered = ErrnoStatus("creation guard: stat the sandbox's root");
      }
      if (!entered.ok()) {
        // Nothing is made by anyone else: this call fails, and so does every later one.
        failed = true;
        root_fd.reset();
        report('F', entered.message());
      }
    }
    if (failed || !SameRoot(proc_fd.get(), request.pid, root_st)) {
      AnswerSeccompRequest(options_.listener.get(), request.id, EPERM).IgnoreError();
      continue;
    }
    if (std::optional<std::string> refused =
            Handle(request, proc_fd.get(), root_fd.get(), &current)) {
      report('V', *refused);
    }
  }
  ::_exit(0);
}

absl::Status CreationGuard::StartProcess() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return ErrnoStatus("creation guard: socketpair");
  }
  UniqueFd ours(pair[0]), theirs(pair[1]);
  // fork, not a thread: a multi-threaded process cannot join a user namespace. The child runs
  // only the guard's own code: glibc keeps malloc usable after fork; nothing of it takes a lock
  // another thread of the supervisor could have held.
  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("creation guard: fork");
  if (pid == 0) {
    ours.reset();
    // Nothing of the supervisor's but what the guard uses: not the sandbox's pipes or the
    // egress listeners.
    int keep[] = {options_.listener.get(), theirs.get()};
    for (int fd = 3; fd < 1024; ++fd) {
      if (std::find(std::begin(keep), std::end(keep), fd) == std::end(keep)) ::close(fd);
    }
    ServeProcess(theirs.get());
  }
  theirs.reset();
  process_ = pid;
  sock_ = std::move(ours);
  char buf[4097];
  ssize_t n;
  do {
    n = ::recv(sock_.get(), buf, sizeof(buf), 0);
  } while (n < 0 && errno == EINTR);
  if (n >= 1 && buf[0] == 'R') return absl::OkStatus();
  if (n >= 1 && buf[0] == 'E') {
    return absl::FailedPreconditionError(std::string(buf + 1, n - 1));
  }
  return absl::InternalError("creation guard: the guard process ended before it was ready");
}

std::vector<Violation> CreationGuard::StopProcess() {
  if (sock_) {
    ::shutdown(sock_.get(), SHUT_WR);
    char buf[4097];
    for (;;) {
      ssize_t n = ::recv(sock_.get(), buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (buf[0] == 'V') Record(std::string(buf + 1, n - 1));
      if (buf[0] == 'F') {
        absl::MutexLock lock(&mu_);
        if (violations_.size() < kMaxViolations) {
          violations_.push_back(Violation{
              "filesystem", absl::StrCat("creation guard could not serve the sandbox (every "
                                         "creating call failed): ",
                                         absl::string_view(buf + 1, n - 1))});
        }
      }
    }
    sock_.reset();
  }
  if (process_ > 0) {
    int status;
    while (::waitpid(process_, &status, 0) < 0 && errno == EINTR) {
    }
    process_ = -1;
  }
  absl::MutexLock lock(&mu_);
  return violations_;
}

}  // namespace moat::sandbox
