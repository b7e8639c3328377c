// Where the running program lives: moat's binaries find their helpers (moat-init, moat-probe) in
// the same directory.
#pragma once

#include <unistd.h>

#include <string>

namespace moat {

// "<directory of /proc/self/exe>/<name>"; just `name` if the link cannot be read.
inline std::string BesideThisProgram(const std::string& name) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  const std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + name;
}

}  // namespace moat
