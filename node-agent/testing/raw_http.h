// Test helper: bytes sent as they are to an HTTP server on 127.0.0.1, for what an HTTP client
// library would not send (pipelined requests, control bytes in headers).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace moat::agent::testing {

struct RawExchange {
  std::string received;  // Everything the server sent.
  bool closed = false;   // The server closed the connection before `wait` passed.
};

// Connects to 127.0.0.1:`port`, sends `request`, and reads until the server closes or `wait`
// passes without it.
inline RawExchange SendRaw(int port, const std::string& request,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(3000)) {
  RawExchange out;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return out;
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return out;
  }
  const auto end = std::chrono::steady_clock::now() + wait;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      out.closed = true;
      break;
    }
    out.received.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace moat::agent::testing
