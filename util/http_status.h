// How both daemons answer an error over HTTP: one mapping from absl::Status to an HTTP status, one
// code per HTTP status, and the flat body OpenSandbox's clients read ({"code", "message"}, their
// ErrorResponse). ResourceExhausted is 429 (a quota, a rate, a full queue: retry later);
// Unavailable and DeadlineExceeded are 503.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moat {

int HttpStatusFor(const absl::Status& status);

// "INVALID_REQUEST", "NOT_FOUND", ...
absl::string_view ErrorCodeFor(int http_status);

nlohmann::json ErrorJson(absl::string_view code, absl::string_view message);
// ErrorJson as text; invalid UTF-8 (a message may quote a client's bytes) is replaced, not thrown.
std::string ErrorBody(absl::string_view code, absl::string_view message);

}  // namespace moat
