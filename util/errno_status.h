#pragma once

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace moat {

// Maps an errno value to the closest absl status code: absl::ErrnoToStatusCode, except for
// ENOTDIR (NotFound), EAGAIN (ResourceExhausted) and EINTR (Aborted).
absl::StatusCode ErrnoToCode(int errno_value);

// A status for a failed system call: "<what>: <strerror(errno)>", with a code derived from errno.
// `what` should name the step and quote paths, e.g. `mount tmpfs on "/tmp"`.
absl::Status ErrnoStatus(absl::string_view what, int errno_value = errno);

}  // namespace moat
