// Test helper: everything a descriptor yields until end of file (or an error), blocking.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string>

namespace moat::sandbox::testing {

inline std::string ReadToEof(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace moat::sandbox::testing
