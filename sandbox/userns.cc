#include "sandbox/userns.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "util/child_failure.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

absl::Status WriteProcFile(pid_t pid, const char* name, const std::string& content) {
  std::string path = absl::StrCat("/proc/", pid, "/", name);
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("user namespace: open \"", path, "\""));
  ssize_t n = ::write(fd, content.data(), content.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(content.size())) {
    return ErrnoStatus(absl::StrCat("user namespace: write \"",
                                    content.substr(0, content.size() - 1), "\" to \"", path, "\""),
                       n < 0 ? err : EIO);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IdMapping> DefaultIdMapping() {
  IdMapping mapping;
  if (::geteuid() == 0) {
    mapping.privileged = true;  // host root: map the sandbox to nobody
  } else {
    mapping.host_uid = ::geteuid();
    mapping.host_gid = ::getegid();
  }
  if (mapping.host_uid == 0 || mapping.host_gid == 0) {
    return absl::FailedPreconditionError(
        "user namespace: refusing to map the sandbox's root to host root");
  }
  return mapping;
}

absl::Status WriteOneIdMaps(pid_t pid, uid_t inside_uid, gid_t inside_gid, uid_t host_uid,
                            gid_t host_gid, bool deny_setgroups) {
  RETURN_IF_ERROR(WriteProcFile(pid, "uid_map", absl::StrCat(inside_uid, " ", host_uid, " 1\n")));
  if (deny_setgroups) RETURN_IF_ERROR(WriteProcFile(pid, "setgroups", "deny\n"));
  return WriteProcFile(pid, "gid_map", absl::StrCat(inside_gid, " ", host_gid, " 1\n"));
}

absl::Status WriteIdMaps(pid_t pid, const IdMapping& mapping) {
  // Without CAP_SETGID on the host the kernel demands that setgroups be denied first. When we
  // are privileged we leave it allowed so the child can drop the supervisor's groups itself.
  return WriteOneIdMaps(pid, 0, 0, mapping.host_uid, mapping.host_gid, !mapping.privileged);
}

// Raw system calls, not glibc's setgroups/setresgid/setresuid: in a multi-threaded process glibc
// applies those to every thread by signalling each one and waiting (the "setxid broadcast"). The
// child was cloned from one thread of such a process; the other threads do not exist in it, so
// glibc would wait for them forever. The raw calls change only the calling thread, which is all
// the child has.
bool BecomeNamespaceRoot(bool privileged, int error_fd) {
  // Supplementary groups come from the supervisor (host root has gid 0 among them). They would
  // keep host group rights for file access, so drop them. Unprivileged supervisors cannot, but
  // their groups are the user's own.
  if (privileged && ::syscall(SYS_setgroups, 0, nullptr) != 0) {
    return ReportChildFailure(error_fd, "user namespace: drop supplementary groups", nullptr,
                              errno);
  }
  if (::syscall(SYS_setresgid, 0, 0, 0) != 0) {
    return ReportChildFailure(error_fd, "user namespace: become gid 0 inside", nullptr, errno);
  }
  if (::syscall(SYS_setresuid, 0, 0, 0) != 0) {
    return ReportChildFailure(error_fd, "user namespace: become uid 0 inside", nullptr, errno);
  }
  return true;
}

}  // namespace moat::sandbox
