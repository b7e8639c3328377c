#include "sandbox/seccomp/seccomp_notify.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sandbox/seccomp/seccomp_policy.h"
#include "util/errno_status.h"

namespace moat::sandbox {
namespace {

// Zeroed storage for a kernel struct that may be larger on the running kernel than in our
// headers: SECCOMP_GET_NOTIF_SIZES says how much the kernel will write, and RECV insists on a
// zeroed buffer.
template <typename T>
class KernelStruct {
 public:
  explicit KernelStruct(size_t kernel_size)
      : words_((std::max(kernel_size, sizeof(T)) + sizeof(uint64_t) - 1) / sizeof(uint64_t), 0) {}
  T* get() { return reinterpret_cast<T*>(words_.data()); }
  T* operator->() { return get(); }

 private:
  std::vector<uint64_t> words_;  // uint64_t keeps the 8-byte alignment the structs need
};

int IoctlRetryingEintr(int fd, unsigned long request, void* arg) {
  int rc;
  do {
    rc = ioctl(fd, request, arg);
  } while (rc < 0 && errno == EINTR);
  return rc;
}

// The kernel's sizes of the notification structs, asked once; zeros if it would not say.
struct seccomp_notif_sizes Sizes() {
  static const struct seccomp_notif_sizes sizes = [] {
    struct seccomp_notif_sizes s = {};
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &s) != 0) s = {};
    return s;
  }();
  return sizes;
}

std::string Describe(const struct seccomp_data& data, Arch arch, std::string& name_out) {
  if (data.arch != AuditArch(arch)) {
    // The filter kills foreign arches before they can notify; say so plainly if it ever happens.
    return absl::StrFormat("syscall %d (arch 0x%x)", data.nr, data.arch);
  }
  name_out = SyscallName(arch, data.nr);
  if (name_out.empty()) return absl::StrCat("syscall ", data.nr);
  uint64_t args[6];  // __u64 is unsigned long long, not uint64_t, on x86-64
  std::copy(std::begin(data.args), std::end(data.args), std::begin(args));
  return DescribeViolation(name_out, args);
}

}  // namespace

absl::StatusOr<SeccompRequest> ReceiveSeccompRequest(int listener_fd) {
  struct seccomp_notif_sizes sizes = Sizes();
  if (sizes.seccomp_notif == 0) {
    return absl::InternalError("the kernel would not say the size of seccomp notifications");
  }
  KernelStruct<struct seccomp_notif> request(sizes.seccomp_notif);
  if (IoctlRetryingEintr(listener_fd, SECCOMP_IOCTL_NOTIF_RECV, request.get()) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          "seccomp notification vanished before it was received: the sandboxed thread died or "
          "was interrupted by a signal");
    }
    return ErrnoStatus(
        absl::StrCat("receive a seccomp notification from listener fd ", listener_fd));
  }
  return SeccompRequest{request->id, static_cast<pid_t>(request->pid), request->data};
}

absl::Status AnswerSeccompRequest(int listener_fd, uint64_t id, int error, int64_t value) {
  struct seccomp_notif_sizes sizes = Sizes();
  if (sizes.seccomp_notif_resp == 0) {
    return absl::InternalError("the kernel would not say the size of seccomp notifications");
  }
  KernelStruct<struct seccomp_notif_resp> response(sizes.seccomp_notif_resp);
  response->id = id;
  response->val = error == 0 ? value : 0;
  response->error = -error;
  response->flags = 0;  // never SECCOMP_USER_NOTIF_FLAG_CONTINUE: nothing is let through unseen
  if (IoctlRetryingEintr(listener_fd, SECCOMP_IOCTL_NOTIF_SEND, response.get()) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          "the notifying thread died or was interrupted by a signal before it was answered");
    }
    return ErrnoStatus(absl::StrCat("answer a seccomp notification on listener fd ", listener_fd));
  }
  return absl::OkStatus();
}

bool SeccompRequestIsValid(int listener_fd, uint64_t id) {
  return IoctlRetryingEintr(listener_fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

absl::Status AnswerSeccompRequestWithFd(int listener_fd, uint64_t id, int fd, bool cloexec) {
  struct seccomp_notif_addfd addfd = {};
  addfd.id = id;
  addfd.flags = SECCOMP_ADDFD_FLAG_SEND;
  addfd.srcfd = static_cast<uint32_t>(fd);
  addfd.newfd_flags = cloexec ? O_CLOEXEC : 0;
  if (IoctlRetryingEintr(listener_fd, SECCOMP_IOCTL_NOTIF_ADDFD, &addfd) < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          "the notifying thread died or was interrupted by a signal before it was answered");
    }
    return ErrnoStatus(
        "hand a descriptor to a sandboxed process (SECCOMP_IOCTL_NOTIF_ADDFD, "
        "Linux 5.14 or later)");
  }
  return absl::OkStatus();
}

SeccompViolation DescribeSeccompRequest(const SeccompRequest& request, Arch arch) {
  std::string name;
  return SeccompViolation{Describe(request.data, arch, name), request.pid};
}

absl::StatusOr<SeccompViolation> AnswerAsViolation(int listener_fd, const SeccompRequest& request,
                                                   Arch arch) {
  std::string name;
  SeccompViolation violation;
  violation.syscall = Describe(request.data, arch, name);
  violation.pid = request.pid;
  absl::Status answered = AnswerSeccompRequest(listener_fd, request.id, ViolationErrno(name));
  if (absl::IsNotFound(answered)) {
    return absl::NotFoundError(absl::StrCat("the thread that called ", violation.syscall, " (pid ",
                                            violation.pid,
                                            ") died or was interrupted by a signal before we "
                                            "answered"));
  }
  if (!answered.ok()) {
    return absl::Status(answered.code(),
                        absl::StrCat(answered.message(), " (for ", violation.syscall, ")"));
  }
  return violation;
}

absl::StatusOr<SeccompViolation> HandleSeccompNotification(int listener_fd, Arch arch) {
  absl::StatusOr<SeccompRequest> request = ReceiveSeccompRequest(listener_fd);
  if (!request.ok()) return request.status();
  return AnswerAsViolation(listener_fd, *request, arch);
}

}  // namespace moat::sandbox
