// Passing one descriptor over a unix socket (SCM_RIGHTS), with a one-byte tag. Both functions
// are allocation-free and async-signal-safe: the sandboxed child sends its seccomp listener with
// SendFd right before execve.
#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace moat {

// Returns whether the message was sent.
inline bool SendFd(int sock, int fd, char tag) {
  struct iovec iov = {&tag, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == 1;
}

// Returns the received descriptor (close-on-exec), or -1 with errno set (EPROTO when the message
// had no descriptor or another tag). `flags` are recvmsg flags, e.g. MSG_DONTWAIT.
inline int ReceiveFd(int sock, char tag, int flags = 0) {
  char byte = 0;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC) != 1) return -1;
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if (byte != tag || cmsg == nullptr || cmsg->cmsg_type != SCM_RIGHTS) {
    errno = EPROTO;
    return -1;
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
  return fd;
}

}  // namespace moat
