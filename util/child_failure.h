// How the sandboxed child tells the supervisor which setup step failed.
//
// The child is a raw clone of a possibly multi-threaded process: it may not allocate, lock or
// format strings. It writes one fixed-size record to a CLOEXEC pipe. `step` and `detail` point at
// string literals or at strings owned by the prepared plan; both live at the same addresses in the
// parent, which still holds the plan, so the parent can read them. A successful execve closes the
// pipe without writing, which is how the parent learns that the command started.
#pragma once

#include <unistd.h>

#include <cerrno>

namespace moat::sandbox {

struct ChildFailure {
  const char* step = nullptr;    // e.g. "mount tmpfs on /tmp"
  const char* detail = nullptr;  // e.g. a path; may be null
  int error = 0;                 // errno
};

// Async-signal-safe. Returns false so callers can write `return Fail(...)`.
inline bool ReportChildFailure(int fd, const char* step, const char* detail, int error) {
  ChildFailure failure{step, detail, error};
  ssize_t unused = ::write(fd, &failure, sizeof(failure));
  (void)unused;
  return false;
}

}  // namespace moat::sandbox
