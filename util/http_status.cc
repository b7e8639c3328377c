#include "util/http_status.h"

namespace moat {

int HttpStatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return 503;
    default:
      return 500;
  }
}

absl::string_view ErrorCodeFor(int http_status) {
  switch (http_status) {
    case 400:
      return "INVALID_REQUEST";
    case 401:
      return "UNAUTHORIZED";
    case 403:
      return "FORBIDDEN";
    case 404:
      return "NOT_FOUND";
    case 405:
      return "METHOD_NOT_ALLOWED";
    case 409:
      return "CONFLICT";
    case 413:
      return "PAYLOAD_TOO_LARGE";
    case 414:
      return "URI_TOO_LONG";
    case 416:
      return "RANGE_NOT_SATISFIABLE";
    case 429:
      return "RESOURCE_EXHAUSTED";
    case 501:
      return "NOT_IMPLEMENTED";
    case 503:
      return "UNAVAILABLE";
    default:
      return http_status < 500 ? "INVALID_REQUEST" : "INTERNAL_ERROR";
  }
}

nlohmann::json ErrorJson(absl::string_view code, absl::string_view message) {
  return {{"code", std::string(code)}, {"message", std::string(message)}};
}

std::string ErrorBody(absl::string_view code, absl::string_view message) {
  return ErrorJson(code, message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moat
