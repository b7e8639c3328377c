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

// What a step needs from the kernel beyond the usual, which decides the advice its failure
// gives (spawn.cc): the step's name is for people, never matched.
enum class StepNeeds : unsigned char {
  kNothingSpecial,  // the advice depends on the error only
  kUserNamespaces,  // enabled and not restricted (sysctls, AppArmor)
  kNewMountApi,     // mount_setattr, pivot_root in a user namespace: Linux >= 5.12
  kSeccompNotify,   // seccomp filters with user notification: Linux >= 5.5
};

struct ChildFailure {
  const char* step = nullptr;    // e.g. "mount tmpfs on /tmp"
  const char* detail = nullptr;  // e.g. a path; may be null
  int error = 0;                 // errno
  StepNeeds needs = StepNeeds::kNothingSpecial;
};

// Async-signal-safe. Returns false so callers can write `return Fail(...)`.
inline bool ReportChildFailure(int fd, const char* step, const char* detail, int error,
                               StepNeeds needs = StepNeeds::kNothingSpecial) {
  ChildFailure failure{step, detail, error, needs};
  ssize_t unused = ::write(fd, &failure, sizeof(failure));
  (void)unused;
  return false;
}

}  // namespace moat::sandbox
