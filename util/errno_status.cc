#include "util/errno_status.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moat {

absl::StatusCode ErrnoToCode(int errno_value) {
  switch (errno_value) {
    // Where moat's callers need another answer than Abseil's:
    case ENOTDIR:  // a component of a client's path is a file: the path does not exist (404)
      return absl::StatusCode::kNotFound;
    case EAGAIN:  // a full queue or pipe, a pids limit: exhausted, retry later (429)
      return absl::StatusCode::kResourceExhausted;
    case EINTR:  // an interrupted call was given up: aborted, not the service unavailable
      return absl::StatusCode::kAborted;
    default:
      return absl::ErrnoToStatusCode(errno_value);
  }
}

absl::Status ErrnoStatus(absl::string_view what, int errno_value) {
  return absl::Status(ErrnoToCode(errno_value), absl::StrCat(what, ": ", strerror(errno_value)));
}

}  // namespace moat
