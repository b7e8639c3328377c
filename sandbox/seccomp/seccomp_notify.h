// The supervisor's side of seccomp user notifications. A program built with notify_violations
// makes every violation (mount, unshare, clone(CLONE_NEW*), socket(AF_VSOCK), ...) wait in the
// kernel until whoever holds the listener fd answers. The supervisor runs outside the sandbox,
// answers with an errno (never "continue", so there is no time-of-check race over the target's
// memory: we read nothing from it) and records the attempt as a violation.
//
//   sandboxed child                    kernel                       supervisor
//   mount(...) ──────────────────────▶ USER_NOTIF, child waits ──▶ poll(listener) says POLLIN
//                                                                  HandleSeccompNotification:
//                                                                    RECV  -> describe "mount"
//   mount returns -1, errno EPERM ◀─── error = -EPERM ◀────────────  SEND  -> EPERM
//
// If nobody holds the listener any more, the kernel fails notifying calls with ENOSYS, so the
// box stays shut when the supervisor dies.
#pragma once

#include <linux/seccomp.h>
#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "sandbox/seccomp/seccomp_filter.h"

namespace moat::sandbox {

struct SeccompViolation {
  std::string
      syscall;    // e.g. "mount", "clone(CLONE_NEWUSER)", "socket(AF_VSOCK)", "ioctl(TIOCSTI)"
  pid_t pid = 0;  // as seen from the supervisor; 0 if outside its pid namespace
};

// One notification as the kernel delivered it.
struct SeccompRequest {
  uint64_t id = 0;
  pid_t pid = 0;  // the calling thread, in the receiver's pid namespace; 0 if outside it
  struct seccomp_data data = {};
};

// Receives one notification (blocking until one is pending: call it when poll() reports POLLIN).
// NotFound if the notifying thread died or was interrupted before it was received.
absl::StatusOr<SeccompRequest> ReceiveSeccompRequest(int listener_fd);

// Answers `id`: the call returns -1 with `error` (> 0), or `value` when `error` is 0. NotFound if
// the thread died or was interrupted by a signal meanwhile (nothing to answer any more).
absl::Status AnswerSeccompRequest(int listener_fd, uint64_t id, int error, int64_t value = 0);

// Whether `id` still waits for an answer: after reading anything of the caller's (its memory,
// its /proc entries), this says that the caller was not replaced by another task meanwhile.
bool SeccompRequestIsValid(int listener_fd, uint64_t id);

// Installs `fd` in the calling process and answers `id` with its number, in one step
// (SECCOMP_ADDFD_FLAG_SEND, Linux 5.14). `cloexec` sets FD_CLOEXEC on the new descriptor.
// NotFound as above.
absl::Status AnswerSeccompRequestWithFd(int listener_fd, uint64_t id, int fd, bool cloexec);

// What `request` attempted ("mount", "clone(CLONE_NEWUSER)", ...), without answering it: a
// supervisor that reports a violation before its answer lets the call return only once the
// report is on its way (the agent's probe does, so that a command's result lists it).
SeccompViolation DescribeSeccompRequest(const SeccompRequest& request, Arch arch);

// Answers `request` as the violation the filter means (ViolationErrno) and describes it.
// NotFound if the caller died or was interrupted before the answer.
absl::StatusOr<SeccompViolation> AnswerAsViolation(int listener_fd, const SeccompRequest& request,
                                                   Arch arch);

// Receives one notification from `listener_fd` (blocking until one is pending: call it when
// poll() reports POLLIN), answers it with the errno the filter means (EAFNOSUPPORT for socket,
// EPERM otherwise, see ViolationErrno) and describes it. `arch` is the program's arch, used to
// name the syscall.
//
// Returns NotFound if the notifying thread died or was interrupted by a signal before we
// answered: not an error to report (an interrupted call is restarted and notifies again).
// Other errors mean the listener is unusable (e.g. EBADF).
absl::StatusOr<SeccompViolation> HandleSeccompNotification(int listener_fd, Arch arch);

}  // namespace moat::sandbox
