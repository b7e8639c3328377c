#include "sandbox/egress/netns_sockets.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "util/errno_status.h"

namespace moat::egress {
namespace {

absl::StatusOr<UniqueFd> BoundSocket(int type, const IpAddress& address, uint16_t port) {
  struct sockaddr_storage sa;
  socklen_t len = address.ToSockaddr(port, &sa);
  UniqueFd fd(::socket(sa.ss_family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const std::string where = absl::StrCat(address.ToString(), ":", port);
  if (!fd) return ErrnoStatus(absl::StrCat("egress: create a socket for ", where));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<const struct sockaddr*>(&sa), len) != 0) {
    return ErrnoStatus(absl::StrCat("egress: bind ", where, " in the sandbox's network namespace"));
  }
  return fd;
}

}  // namespace

absl::Status InNetworkNamespace(int pidfd, absl::FunctionRef<absl::Status()> fn) {
  absl::Status status;
  std::thread worker([&] {
    if (::setns(pidfd, CLONE_NEWNET) != 0) {
      status = ErrnoStatus(
          "egress: join the sandbox's network namespace (setns; moat must run as root)");
      return;
    }
    status = fn();
  });
  worker.join();
  return status;
}

absl::StatusOr<UniqueFd> ListenTcp(const IpAddress& address, uint16_t port) {
  absl::StatusOr<UniqueFd> fd = BoundSocket(SOCK_STREAM, address, port);
  if (!fd.ok()) return fd;
  if (::listen(fd->get(), 128) != 0) {
    return ErrnoStatus(absl::StrCat("egress: listen on ", address.ToString(), ":", port));
  }
  return fd;
}

absl::StatusOr<UniqueFd> BindUdp(const IpAddress& address, uint16_t port) {
  return BoundSocket(SOCK_DGRAM, address, port);
}

}  // namespace moat::egress
