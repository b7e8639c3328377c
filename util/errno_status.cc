#include "util/errno_status.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moat {

absl::StatusCode ErrnoToCode(int errno_value) {
  switch (errno_value) {
    case 0:
      return absl::StatusCode::kOk;
    case EINVAL:
    case ENAMETOOLONG:
    case E2BIG:
    case EDOM:
    case EILSEQ:
      return absl::StatusCode::kInvalidArgument;
    case ENOENT:
    case ENOTDIR:
    case ESRCH:
    case ENXIO:
      return absl::StatusCode::kNotFound;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EPERM:
    case EACCES:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
    case EUSERS:
      return absl::StatusCode::kResourceExhausted;
    case ENOSYS:
    case EOPNOTSUPP:
    case EAFNOSUPPORT:
    case EPROTONOSUPPORT:
      return absl::StatusCode::kUnimplemented;
    case EBUSY:
    case ENOTEMPTY:
      return absl::StatusCode::kFailedPrecondition;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case EINTR:
      return absl::StatusCode::kAborted;
    default:
      return absl::StatusCode::kUnknown;
  }
}

absl::Status ErrnoStatus(absl::string_view what, int errno_value) {
  return absl::Status(ErrnoToCode(errno_value), absl::StrCat(what, ": ", strerror(errno_value)));
}

}  // namespace moat
