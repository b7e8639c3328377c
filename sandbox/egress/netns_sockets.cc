#include "sandbox/egress/netns_sockets.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
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

absl::Status CheckListener(int fd, int type, const IpAddress& address, uint16_t port) {
  const std::string want = absl::StrCat(address.ToString(), ":", port,
                                        type == SOCK_STREAM ? " (tcp, listening)" : " (udp)");
  auto refuse = [&](absl::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("egress: a listener from the sandbox is not ", want, ": ", what));
  };
  int domain = 0, got_type = 0, accepting = 0;
  socklen_t len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) {
    return refuse(absl::StrCat("not a socket (", strerror(errno), ")"));
  }
  len = sizeof(int);
  ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &got_type, &len);
  if (domain != (address.is_v4() ? AF_INET : AF_INET6) || got_type != type) {
    return refuse(absl::StrCat("family ", domain, ", type ", got_type));
  }
  struct sockaddr_storage sa = {};
  len = sizeof(sa);
  if (::getsockname(fd, reinterpret_cast<struct sockaddr*>(&sa), &len) != 0) {
    return refuse(absl::StrCat("no address (", strerror(errno), ")"));
  }
  std::optional<IpAddress> bound = IpAddress::FromSockaddr(reinterpret_cast<struct sockaddr*>(&sa));
  const uint16_t bound_port =
      ntohs(sa.ss_family == AF_INET ? reinterpret_cast<struct sockaddr_in*>(&sa)->sin_port
                                    : reinterpret_cast<struct sockaddr_in6*>(&sa)->sin6_port);
  if (!bound || *bound != address || bound_port != port) {
    return refuse(absl::StrCat("bound to ", bound ? bound->ToString() : "?", ":", bound_port));
  }
  len = sizeof(int);
  if (type == SOCK_STREAM &&
      (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || accepting != 1)) {
    return refuse("not listening");
  }
  return absl::OkStatus();
}

}  // namespace moat::egress
