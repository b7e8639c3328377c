#include "node-agent/api/api_json.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/strict_json.h"

namespace moat::agent {
namespace {

using nlohmann::json;

constexpr size_t kMaxMapEntries = 128;
constexpr size_t kMaxKeyBytes = 256;
constexpr size_t kMaxValueBytes = 4096;

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" ", what));
}

// Strict (util/strict_json.h): duplicate keys and deep nesting refused while parsing.
absl::StatusOr<json> ParseObject(absl::string_view body) {
  absl::StatusOr<json> doc = ParseStrictJson<json>(body);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body is not valid JSON (", doc.status().message(), "); send a JSON object"));
  }
  if (!doc->is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  return doc;
}

absl::Status CheckFields(const json& object, absl::string_view where,
                         const std::set<std::string>& allowed) {
  for (const auto& [key, value] : object.items()) {
    if (!allowed.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown field \"", key, "\"",
                                                     where.empty() ? "" : " in ", where,
                                                     "; allowed: ", absl::StrJoin(allowed, ", ")));
    }
  }
  return absl::OkStatus();
}

// A JSON object of strings -> map, bounded so a request cannot make the agent hold megabytes
// per sandbox. Env names may not contain '=' or NUL (execve's format).
absl::StatusOr<std::map<std::string, std::string>> StringMap(const json& value,
                                                             absl::string_view field, bool env) {
  if (!value.is_object()) return Bad(field, "must be an object of strings");
  if (value.size() > kMaxMapEntries) {
    return Bad(field, absl::StrCat("has more than ", kMaxMapEntries, " entries"));
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) return Bad(absl::StrCat(field, ".", key), "must be a string");
    const std::string& text = item.get_ref<const std::string&>();
    if (key.empty() || key.size() > kMaxKeyBytes || text.size() > kMaxValueBytes) {
      return Bad(field, absl::StrCat("keys must be 1 to ", kMaxKeyBytes,
                                     " bytes and values at most ", kMaxValueBytes));
    }
    if (env && (key.find('=') != std::string::npos || key.find('\0') != std::string::npos ||
                text.find('\0') != std::string::npos)) {
      return Bad(absl::StrCat(field, ".", key), "has '=' or NUL in its name, or NUL in its value");
    }
    out[key] = text;
  }
  return out;
}

absl::StatusOr<uint64_t> PositiveInteger(const json& value, absl::string_view field, uint64_t max) {
  if (!value.is_number_integer() ||
      (value.is_number_integer() && !value.is_number_unsigned() && value.get<int64_t>() < 1)) {
    return Bad(field, absl::StrCat("must be a whole number from 1 to ", max));
  }
  uint64_t n = value.get<uint64_t>();
  if (n < 1 || n > max) return Bad(field, absl::StrCat("must be a whole number from 1 to ", max));
  return n;
}

absl::StatusOr<Limits> ParseLimits(const json& value) {
  if (!value.is_object()) return Bad("limits", "must be an object");
  if (absl::Status s =
          CheckFields(value, "limits", {"cpus", "memory_bytes", "pids", "workspace_bytes"});
      !s.ok()) {
    return s;
  }
  Limits limits;
  constexpr uint64_t kMax = uint64_t{1} << 62;
  if (value.contains("cpus")) {
    const json& cpus = value["cpus"];
    if (!cpus.is_number() || !(cpus.get<double>() > 0) || cpus.get<double>() > 4096) {
      return Bad("limits.cpus", "must be a number of cores above 0 (e.g. 0.5)");
    }
    limits.cpus = cpus.get<double>();
  }
  for (auto [name, field] :
       {std::pair{"memory_bytes", &limits.memory_bytes}, std::pair{"pids", &limits.pids},
        std::pair{"workspace_bytes", &limits.workspace_bytes}}) {
    if (!value.contains(name)) continue;
    auto n = PositiveInteger(value[name], absl::StrCat("limits.", name), kMax);
    if (!n.ok()) return n.status();
    *field = *n;
  }
  return limits;
}

}  // namespace

absl::StatusOr<CreateRequest> ParseCreateRequest(absl::string_view body) {
  auto doc = ParseObject(body);
  if (!doc.ok()) return doc.status();
  if (absl::Status s = CheckFields(
          *doc, "",
          {"profile", "policy", "limits", "env", "ttl_seconds", "metadata", "entrypoint"});
      !s.ok()) {
    return s;
  }
  CreateRequest request;
  if (!doc->contains("profile") || !(*doc)["profile"].is_string()) {
    return Bad("profile", "is required and must be a string (a profile of this node)");
  }
  request.profile = (*doc)["profile"].get<std::string>();
  if (doc->contains("policy")) {
    const json& policy = (*doc)["policy"];
    if (!policy.is_object()) return Bad("policy", "must be an object (a policy document)");
    request.policy = policy.dump();  // JSON is YAML: the runtime's policy parser reads it.
  }
  if (doc->contains("limits")) {
    auto limits = ParseLimits((*doc)["limits"]);
    if (!limits.ok()) return limits.status();
    request.limits = *limits;
  }
  for (auto [name, field] :
       {std::pair{"env", &request.env}, std::pair{"metadata", &request.metadata}}) {
    if (!doc->contains(name)) continue;
    auto map = StringMap((*doc)[name], name, std::string_view(name) == "env");
    if (!map.ok()) return map.status();
    *field = std::move(*map);
  }
  if (doc->contains("ttl_seconds")) {
    constexpr uint64_t kMaxTtl = 10LL * 365 * 24 * 3600;  // The config caps it further.
    auto ttl = PositiveInteger((*doc)["ttl_seconds"], "ttl_seconds", kMaxTtl);
    if (!ttl.ok()) return ttl.status();
    request.ttl = absl::Seconds(static_cast<int64_t>(*ttl));
  }
  if (doc->contains("entrypoint")) {
    const json& words = (*doc)["entrypoint"];
    if (!words.is_array() || words.empty()) {
      return Bad("entrypoint",
                 "must be a non-empty array of strings (the program and its "
                 "arguments), e.g. [\"tail\", \"-f\", \"/dev/null\"]");
    }
    for (const json& word : words) {
      if (!word.is_string()) return Bad("entrypoint", "must hold only strings");
      request.entrypoint.push_back(word.get<std::string>());
    }
  }
  return request;
}

absl::StatusOr<absl::Time> ParseRenewRequest(absl::string_view body, absl::Time now) {
  auto doc = ParseObject(body);
  if (!doc.ok()) return doc.status();
  if (absl::Status s = CheckFields(*doc, "", {"ttl_seconds", "expires_at"}); !s.ok()) return s;
  if (doc->contains("ttl_seconds") == doc->contains("expires_at")) {
    return absl::InvalidArgumentError("give exactly one of \"ttl_seconds\" and \"expires_at\"");
  }
  if (doc->contains("ttl_seconds")) {
    constexpr uint64_t kMaxTtl = 10LL * 365 * 24 * 3600;
    auto ttl = PositiveInteger((*doc)["ttl_seconds"], "ttl_seconds", kMaxTtl);
    if (!ttl.ok()) return ttl.status();
    return now + absl::Seconds(static_cast<int64_t>(*ttl));
  }
  const json& at = (*doc)["expires_at"];
  absl::Time t;
  std::string err;
  if (!at.is_string() || !absl::ParseTime(absl::RFC3339_full, at.get<std::string>(), &t, &err)) {
    return Bad("expires_at", "must be an RFC 3339 time such as \"2026-11-30T14:30:45Z\"");
  }
  return t;
}

std::string FormatApiTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

nlohmann::json SandboxJson(const SandboxRecord& r, bool with_token) {
  json out = {
      {"id", r.id},
      {"profile", r.profile},
      {"state", std::string(StateName(r.state))},
      {"paused", r.paused},
      {"start_path", r.start_path == StartPath::kWarm ? "warm" : "cold"},
      {"created_at", FormatApiTime(r.created)},
      {"expires_at", FormatApiTime(r.expires_at)},
      {"last_transition_at", FormatApiTime(r.last_transition)},
      {"metadata", r.metadata},
      {"limits",
       {{"cpus", r.limits.cpus},
        {"memory_bytes", r.limits.memory_bytes},
        {"pids", r.limits.pids},
        {"workspace_bytes", r.limits.workspace_bytes}}},
  };
  if (with_token) out["token"] = r.token;
  return out;
}

nlohmann::json CleanupJson(const CleanupReport& report) {
  return {{"processes_killed", report.processes_killed},
          {"cgroups_removed", report.cgroups_removed},
          {"mounts_unmounted", report.mounts_unmounted},
          {"workspaces_removed", report.workspaces_removed},
          {"residue", report.residue}};
}

nlohmann::json EventJson(const AgentEvent& event) {
  return {{"seq", event.seq},   {"time", FormatApiTime(event.time)},
          {"type", event.type}, {"sandbox_id", event.sandbox_id},
          {"kind", event.kind}, {"detail", event.detail}};
}

}  // namespace moat::agent
