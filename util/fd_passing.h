// Passing descriptors over a unix socket (SCM_RIGHTS), with a one-byte tag. Every function is
// allocation-free and async-signal-safe: the sandboxed child sends its seccomp listener with
// SendFd right before execve, and its egress listeners with SendFds (contain.h).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace moat {

// The most descriptors one message carries.
inline constexpr int kMaxPassedFds = 8;

// Sends `n` (1 to kMaxPassedFds) descriptors in one message. Returns whether it was sent.
inline bool SendFds(int sock, const int* fds, int n, char tag) {
  if (n < 1 || n > kMaxPassedFds) {
    errno = EINVAL;
    return false;
  }
  struct iovec iov = {&tag, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n);
  std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * n);
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == 1;
}

inline bool SendFd(int sock, int fd, char tag) { return SendFds(sock, &fd, 1, tag); }

// Receives one message of descriptors (close-on-exec) into `fds` (room for `max`, at most
// kMaxPassedFds) and returns how many, or -1 with errno set: EPROTO when the message had no
// descriptor, another tag, or more than `max` (then none is kept open); EPIPE at EOF. `flags` are
// recvmsg flags, e.g. MSG_DONTWAIT.
inline int ReceiveFds(int sock, char tag, int* fds, int max, int flags = 0) {
  char byte = 0;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t got_bytes = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  if (got_bytes == 0) errno = EPIPE;  // the sender is gone
  if (got_bytes != 1) return -1;
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if (cmsg == nullptr || cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) {
    errno = EPROTO;
    return -1;
  }
  const int n = static_cast<int>((cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int));
  int got[kMaxPassedFds];
  std::memcpy(got, CMSG_DATA(cmsg), sizeof(int) * n);
  if (byte != tag || n < 1 || n > max || (msg.msg_flags & MSG_CTRUNC) != 0) {
    for (int i = 0; i < n; ++i) ::close(got[i]);
    errno = EPROTO;
    return -1;
  }
  std::memcpy(fds, got, sizeof(int) * n);
  return n;
}

// Returns the received descriptor, or -1 with errno set (EPROTO when the message had no
// descriptor, more than one, or another tag).
inline int ReceiveFd(int sock, char tag, int flags = 0) {
  int fd = -1;
  return ReceiveFds(sock, tag, &fd, 1, flags) == 1 ? fd : -1;
}

}  // namespace moat
