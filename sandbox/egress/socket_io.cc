#include "sandbox/egress/socket_io.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "util/errno_status.h"

namespace moat::egress {
namespace {

// Milliseconds until `deadline` for poll(), rounded up so a wait never ends early.
int PollTimeout(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 1 << 30));
}

}  // namespace

absl::Status WaitFor(int fd, short events, absl::Time deadline, int stop_fd) {
  for (;;) {
    struct pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, PollTimeout(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("poll a proxied connection");
    }
    if (stop_fd >= 0 && fds[1].revents != 0) return absl::CancelledError("the proxy is stopping");
    if (fds[0].revents != 0) return absl::OkStatus();
    if (n == 0 && absl::Now() >= deadline) return absl::DeadlineExceededError("timed out");
  }
}

absl::StatusOr<size_t> RecvSome(int fd, std::string* buffer, size_t max, absl::Time deadline,
                                int stop_fd) {
  const size_t old_size = buffer->size();
  buffer->resize(old_size + max);
  for (;;) {
    const ssize_t n = ::recv(fd, buffer->data() + old_size, max, 0);
    if (n >= 0) {
      buffer->resize(old_size + static_cast<size_t>(n));
      return static_cast<size_t>(n);
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      buffer->resize(old_size);
      return ErrnoStatus("read from a proxied connection");
    }
    if (absl::Status ready = WaitFor(fd, POLLIN, deadline, stop_fd); !ready.ok()) {
      buffer->resize(old_size);
      return ready;
    }
  }
}

absl::Status SendAll(int fd, absl::string_view data, absl::Time deadline, int stop_fd) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return ErrnoStatus("write to a proxied connection");
    if (absl::Status ready = WaitFor(fd, POLLOUT, deadline, stop_fd); !ready.ok()) return ready;
  }
  return absl::OkStatus();
}

std::string AddressPortText(const IpAddress& address, uint16_t port) {
  return address.is_v4() ? absl::StrCat(address.ToString(), ":", port)
                         : absl::StrCat("[", address.ToString(), "]:", port);
}

Dialed Dial(const IpAddress& address, uint16_t port, absl::Duration timeout, int stop_fd) {
  Dialed out;
  const std::string where = AddressPortText(address, port);
  auto fail = [&](int error, absl::string_view why) {
    out.fd.reset();
    out.error = error;
    out.message = absl::StrCat("connect to ", where, ": ", why);
    return std::move(out);
  };
  struct sockaddr_storage storage;
  const socklen_t length = address.ToSockaddr(port, &storage);
  out.fd.reset(::socket(storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!out.fd.valid()) return fail(errno, std::strerror(errno));
  // Small requests and TLS handshakes go out at once instead of waiting for Nagle's timer.
  const int one = 1;
  ::setsockopt(out.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(out.fd.get(), reinterpret_cast<struct sockaddr*>(&storage), length) == 0) {
    return out;
  }
  if (errno != EINPROGRESS) return fail(errno, std::strerror(errno));
  const absl::Status ready = WaitFor(out.fd.get(), POLLOUT, absl::Now() + timeout, stop_fd);
  if (absl::IsDeadlineExceeded(ready)) {
    return fail(ETIMEDOUT, absl::StrCat("no answer within ", absl::FormatDuration(timeout)));
  }
  if (absl::IsCancelled(ready)) return fail(ECANCELED, "the proxy is stopping");
  if (!ready.ok()) return fail(EIO, ready.message());
  int error = 0;
  socklen_t error_length = sizeof(error);
  if (::getsockopt(out.fd.get(), SOL_SOCKET, SO_ERROR, &error, &error_length) != 0) error = errno;
  if (error != 0) return fail(error, std::strerror(error));
  return out;
}

}  // namespace moat::egress
