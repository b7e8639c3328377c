// The controller's JSON, without HTTP: strict parsing of OpenSandbox lifecycle requests and of
// the agents' join and heartbeat bodies (unknown fields and wrong types are 400s that name the
// field), and the shapes of responses, as OpenSandbox's servers send them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "controller/config.h"
#include "controller/nodes.h"
#include "controller/sandboxes.h"
#include "controller/tenants/run_limits.h"
#include "nlohmann/json.hpp"
#include "util/http_status.h"    // HttpStatusFor, ErrorCodeFor, ErrorJson
#include "util/shell_command.h"  // ShellQuote, ExecCommand

namespace moat::controller {

// POST /sandboxes. image.uri maps to a profile through the config's images table;
// resourceLimits (Kubernetes quantities: cpu "500m", memory "512Mi") are what the scheduler
// reserves; timeout (seconds, >= 60, at most api.max_timeout; null: no expiry).
absl::StatusOr<Sandbox> ParseCreateSandbox(absl::string_view body, const ControllerConfig& config,
                                           absl::Time now);
absl::StatusOr<std::string> NewSandboxId();  // A random UUID (version 4).
nlohmann::json SandboxJson(const Sandbox& s);
std::string FormatApiTime(absl::Time t);  // RFC 3339, UTC, milliseconds.

// GET /sandboxes?state=Running&state=Paused&metadata=k%3Dv%26k2%3Dv2&page=1&pageSize=20
struct ListQuery {
  std::vector<std::string> states;              // OR; empty: any.
  std::map<std::string, std::string> metadata;  // AND.
  int page = 1;
  int page_size = 20;  // 1 to 200.
};
absl::StatusOr<ListQuery> ParseListQuery(const std::multimap<std::string, std::string>& params);
// `all` newest first; the page the query asks for.
nlohmann::json ListJson(const std::vector<Sandbox>& all, const ListQuery& query);

// {"expiresAt": RFC 3339}
absl::StatusOr<absl::Time> ParseRenew(absl::string_view body);
// A JSON merge patch of string values; null removes a key.
absl::StatusOr<std::map<std::string, std::optional<std::string>>> ParseMetadataPatch(
    absl::string_view body);

// POST /v1/run: {"command": "echo hi" or ["echo", "hi"]} or {"code": "...", "language":
// "python" (python, sh, bash, node)}; optional image, env, timeout (wall seconds, 1 to
// api.max_timeout), expectedDuration (seconds, the run's declared duration: issue 13),
// resourceLimits, resourceRequests, networkPolicy, platform, metadata. The sandbox's spec is a
// create's (ParseCreateSandbox) with image "default" unless given. The wall and CPU limits are
// the language profile's (ApplyRunLimits), `timeout` at most lowering the wall limit.
struct RunRequest {
  Sandbox spec;
  AgentCommand command;
  // The language profile (controller/tenants/run_limits.h) whose limits apply: python,
  // javascript (node), shell (sh, bash, and every "command").
  std::string profile;
  std::optional<absl::Duration> declared;  // expectedDuration.
  std::optional<absl::Duration> timeout;   // As given; the command's wall limit at most.
  RunLimits limits;                        // Filled by ApplyRunLimits.
  bool limited = false;
  // What the pre-check scans: the code and its language ("python", "sh", "bash", "node"), or
  // the command line (language empty).
  std::string scanned;
  std::string language;
};
absl::StatusOr<RunRequest> ParseRunRequest(absl::string_view body, const ControllerConfig& config,
                                           absl::Time now);
// The run's wall and CPU limits from `limits` (RunLimiter::LimitsFor of run.profile and
// run.declared): the wall limit is the profile's (or the declaration's), or `timeout` when
// given and not above it (InvalidArgument otherwise, saying to declare a duration); the CPU
// limit keeps the profile's CPU/wall ratio. The sandbox lives at least as long as the run.
absl::Status ApplyRunLimits(RunRequest& run, const RunLimits& limits, absl::Time now);
// `moat run --json`'s result (sandbox/result.h) from what the agent reported.
nlohmann::json RunResultJson(const AgentCommandResult& r);

// POST /v1/nodes/{name}/drain: an empty body, or {"gracePeriodSeconds": 0 to 86400} (default 0:
// the node's sandboxes end at once).
absl::StatusOr<absl::Duration> ParseDrain(absl::string_view body);

struct JoinRequest {
  std::string name;  // [a-z0-9][a-z0-9._-]{0,62}
  std::string nonce;
  int64_t timestamp = 0;
  std::string proof;
  NodeReport report;  // Without agent_token: that comes with the first heartbeat.
};
absl::StatusOr<JoinRequest> ParseJoinRequest(absl::string_view body);
struct HeartbeatRequest {
  NodeReport report;  // With agent_token.
  // The agent stops and leaves its sandboxes running for the next one (its restart_grace):
  // the node is not schedulable, and not lost, for this long. Zero: an ordinary heartbeat.
  absl::Duration away = absl::ZeroDuration();
};
// {"report": {...}, "away_for_seconds": N (optional, 1 to 3600)}.
absl::StatusOr<HeartbeatRequest> ParseHeartbeat(absl::string_view body);
nlohmann::json NodeJson(const NodeView& node);

// Kubernetes quantities: "500m" -> 0.5 cores; "512Mi" -> 536870912 bytes.
absl::StatusOr<double> ParseCpuQuantity(absl::string_view text);
absl::StatusOr<uint64_t> ParseMemoryQuantity(absl::string_view text);

}  // namespace moat::controller
