// The node API's JSON: strict parsing of request bodies (unknown fields and wrong types are
// errors that name the field) and the shapes of responses. No HTTP here.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "node-agent/backend/backend.h"
#include "node-agent/event_log.h"
#include "node-agent/pool/registry.h"
#include "node-agent/service.h"
#include "util/http_status.h"  // HttpStatusFor, ErrorCodeFor, ErrorBody

namespace moat::agent {

// POST /v1/sandboxes:
//   {"profile": "python", "policy": {...}, "limits": {"cpus": 1, "memory_bytes": 1, "pids": 1,
//    "workspace_bytes": 1}, "env": {"K": "V"}, "ttl_seconds": 600, "metadata": {"k": "v"}}
// Only "profile" is required. "policy" is a policy document (as in `moat run --policy` files).
absl::StatusOr<CreateRequest> ParseCreateRequest(absl::string_view body);

// POST /v1/sandboxes/{id}/renew: {"ttl_seconds": N} (from now) or {"expires_at": RFC 3339}.
absl::StatusOr<absl::Time> ParseRenewRequest(absl::string_view body, absl::Time now);

// A sandbox as the API shows it. The token is included only in the create response.
nlohmann::json SandboxJson(const SandboxRecord& record, bool with_token);
nlohmann::json CleanupJson(const CleanupReport& report);
nlohmann::json EventJson(const AgentEvent& event);
std::string FormatApiTime(absl::Time t);  // RFC 3339, UTC.

}  // namespace moat::agent
