#include "sandbox/caps.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "util/child_failure.h"

namespace moat::sandbox {

int LastCapability() {
  int last = CAP_LAST_CAP;
  int fd = ::open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[16] = {};
    if (::read(fd, buf, sizeof(buf) - 1) > 0) last = std::atoi(buf);
    ::close(fd);
  }
  return last;
}

bool DropAllCapabilities(int last_cap, int error_fd) {
  // Root inside the namespace would get full capabilities back at execve; NOROOT stops that.
  constexpr unsigned long kSecureBits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
                                        SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
                                        SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                                        SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, kSecureBits, 0, 0, 0) != 0) {
    return ReportChildFailure(error_fd, "capabilities: lock securebits", nullptr, errno);
  }
  for (int cap = 0; cap <= last_cap; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      return ReportChildFailure(error_fd, "capabilities: drop from the bounding set", nullptr,
                                errno);
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    return ReportChildFailure(error_fd, "capabilities: clear the ambient set", nullptr, errno);
  }
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capset, &header, data) != 0) {
    return ReportChildFailure(error_fd, "capabilities: clear all sets", nullptr, errno);
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return ReportChildFailure(error_fd, "set no_new_privs", nullptr, errno);
  }
  return true;
}

}  // namespace moat::sandbox
