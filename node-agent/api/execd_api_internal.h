// Helpers shared by execd_api.cc (commands) and execd_api_files.cc (files); not an interface.
#pragma once

#include <httplib.h>

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "node-agent/api/api_json.h"
#include "node-agent/backend/workspace_path.h"
#include "node-agent/pool/registry.h"
#include "util/http/reply.h"
#include "util/strict_json.h"

namespace moat::agent::execd_internal {

// Routes are "/v1/sandboxes/{id}/execd" + this suffix; match 1 is the sandbox id.
inline std::string Route(absl::string_view suffix) {
  return absl::StrCat(R"(/v1/sandboxes/([^/]+)/execd)", suffix);
}

using http::SendError;
using http::SendStatus;
inline void SendJson(httplib::Response& res, const nlohmann::json& body) {
  http::SendJson(res, 200, body);
}

// The sandbox of the request, if it can take commands and file operations now. HttpApi has
// checked its token, so it exists unless it was deleted since.
inline absl::StatusOr<SandboxRecord> UsableSandbox(const Registry& registry,
                                                   const httplib::Request& req) {
  absl::StatusOr<SandboxRecord> record = registry.Get(req.matches[1].str());
  if (!record.ok()) return record.status();
  if (record->state != SandboxState::kReady && record->state != SandboxState::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sandbox ", record->id, " is ", StateName(record->state), "; it takes no requests now"));
  }
  if (record->paused) {
    return absl::FailedPreconditionError(absl::StrCat("sandbox ", record->id,
                                                      " is paused; resume it (POST /v1/sandboxes/",
                                                      record->id, "/resume) first"));
  }
  return record;
}

// "~" and "$VAR" / "${VAR}" of a caller's path, against the sandbox's own environment (its
// create-time env; HOME defaults to /workspace, the commands' working directory). An unset
// variable expands to nothing, as in the shell.
inline std::string ExpandPath(absl::string_view path,
                              const std::map<std::string, std::string>& env) {
  auto lookup = [&](absl::string_view name) -> std::string {
    auto it = env.find(std::string(name));
    if (it != env.end()) return it->second;
    return name == "HOME" ? "/workspace" : "";
  };
  std::string out;
  if (path == "~" || absl::StartsWith(path, "~/")) {
    out = lookup("HOME");
    path.remove_prefix(1);
  }
  auto name_char = [](char c) { return absl::ascii_isalnum(c) || c == '_'; };
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '$' || i + 1 == path.size()) {
      out += path[i];
      continue;
    }
    if (path[i + 1] == '{') {
      size_t close = path.find('}', i + 2);
      if (close == absl::string_view::npos) {
        out += path[i];
        continue;
      }
      out += lookup(path.substr(i + 2, close - i - 2));
      i = close;
      continue;
    }
    size_t end = i + 1;
    while (end < path.size() && name_char(path[end])) ++end;
    if (end == i + 1) {
      out += path[i];
      continue;
    }
    out += lookup(path.substr(i + 1, end - i - 1));
    i = end - 1;
  }
  return out;
}

// A caller's path as the absolute sandbox path the backend gets: anywhere the sandbox can see
// (relative paths are under /workspace), "~" and "$VAR" expanded against `env`. Only the text
// is checked here (no NUL or control bytes, no ".."): where the path leads, symlinks included,
// is for the backend's resolution inside the sandbox's root to decide.
inline absl::StatusOr<std::string> SandboxPath(absl::string_view path,
                                               const std::map<std::string, std::string>& env = {}) {
  if (path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("file path contains a NUL byte; remove it");
  }
  std::string expanded = ExpandPath(path, env);
  absl::StatusOr<std::string> rel = SandboxRootRelativePath(expanded);
  if (!rel.ok()) return rel.status();
  return absl::StrCat("/", *rel);
}

// JSON bodies: strict (util/strict_json.h): duplicate keys and deep nesting refused while parsing.
inline absl::StatusOr<nlohmann::json> ParseBody(absl::string_view body) {
  absl::StatusOr<nlohmann::json> doc = ParseStrictJson<nlohmann::json>(body);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body is not valid JSON (", doc.status().message(), "); see the execd API schema"));
  }
  return doc;
}

}  // namespace moat::agent::execd_internal
