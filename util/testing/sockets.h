// Test helper: the TCP connections this process holds to a loopback port, found through
// /proc/self/fd (each fd's peer address), so that a test can check how a client's live socket
// is set up (TCP_NODELAY) or how many it opened.
//
// Header-only, for tests of every layer (util/testing sits on util).
#pragma once

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>
#include <vector>

namespace moat::testing {

// The fds of this process's sockets whose peer is IPv4 port `port` (any address).
inline std::vector<int> ConnectionsTo(int port) {
  std::vector<int> found;
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return found;
  while (dirent* e = readdir(fds)) {
    if (e->d_name[0] == '.') continue;
    const int fd = atoi(e->d_name);
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0 &&
        peer.sin_family == AF_INET && ntohs(peer.sin_port) == port) {
      found.push_back(fd);
    }
  }
  closedir(fds);
  return found;
}

// Whether the socket `fd` sends small writes at once (TCP_NODELAY: no Nagle wait for an ACK).
inline bool SendsAtOnce(int fd) {
  int nodelay = 0;
  socklen_t len = sizeof(nodelay);
  return getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len) == 0 && nodelay != 0;
}

}  // namespace moat::testing
