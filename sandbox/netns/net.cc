#include "sandbox/netns/net.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/child_failure.h"
#include "util/errno_status.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

bool BringUpLoopback(int error_fd) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ReportChildFailure(error_fd, "network: socket for lo", nullptr, errno);
  struct ifreq ifr = {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  bool ok = true;
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    ok = ReportChildFailure(error_fd, "network: read flags of lo", nullptr, errno);
  } else {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) {
      ok = ReportChildFailure(error_fd, "network: bring lo up", nullptr, errno);
    }
  }
  ::close(fd);
  return ok;
}

absl::Status BringUpLoopbackInThisThread() {
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return ErrnoStatus("network: socket to bring lo up");
  struct ifreq ifr = {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) return ErrnoStatus("network: flags of lo");
  if ((ifr.ifr_flags & IFF_UP) != 0) return absl::OkStatus();
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) return ErrnoStatus("network: bring lo up");
  return absl::OkStatus();
}

}  // namespace moat::sandbox
