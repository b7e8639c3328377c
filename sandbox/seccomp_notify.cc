#include "sandbox/seccomp_notify.h"

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
#include "sandbox/seccomp_policy.h"
#include "sandbox/util/errno_status.h"

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

absl::StatusOr<SeccompViolation> HandleSeccompNotification(int listener_fd, Arch arch) {
  struct seccomp_notif_sizes sizes = {};
  if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) {
    return ErrnoStatus("ask the kernel for seccomp notification sizes");
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

  std::string name;
  SeccompViolation violation;
  violation.syscall = Describe(request->data, arch, name);
  violation.pid = static_cast<pid_t>(request->pid);

  KernelStruct<struct seccomp_notif_resp> response(sizes.seccomp_notif_resp);
  response->id = request->id;
  response->val = 0;
  response->error = -ViolationErrno(name);
  response->flags = 0;  // never SECCOMP_USER_NOTIF_FLAG_CONTINUE: a violation is always denied
  if (IoctlRetryingEintr(listener_fd, SECCOMP_IOCTL_NOTIF_SEND, response.get()) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("the thread that called ", violation.syscall, " (pid ", violation.pid,
                       ") died or was interrupted by a signal before we answered"));
    }
    return ErrnoStatus(absl::StrCat("answer the seccomp notification for ", violation.syscall,
                                    " on listener fd ", listener_fd));
  }
  return violation;
}

}  // namespace moat::sandbox
