// Answers in the shape both daemons' clients read: JSON bodies, and errors as OpenSandbox's flat
// {"code", "message"} object with the HTTP status util/http_status.h maps from an absl::Status.
#pragma once

#include <httplib.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moat::http {

inline constexpr char kJsonType[] = "application/json";

// `body` as JSON; invalid UTF-8 in it (a value may quote a client's bytes) is replaced.
void SendJson(httplib::Response& res, int http_status, const nlohmann::json& body);

// {"code", "message"}; the code is the HTTP status's (ErrorCodeFor) unless one is given.
void SendError(httplib::Response& res, int http_status, absl::string_view message,
               absl::string_view code = {});

// The error for a failed Status (its message to the client as is: write it for the client).
void SendStatus(httplib::Response& res, const absl::Status& status);

}  // namespace moat::http
