#include "node-agent/backend/workspace_path.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace moat::agent {

namespace {

absl::Status CheckPathText(absl::string_view path) {
  constexpr size_t kMaxPath = 4096;
  if (path.size() > kMaxPath) {
    return absl::InvalidArgumentError(
        absl::StrCat("file path is ", path.size(), " bytes long; the limit is ", kMaxPath));
  }
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("file path contains a control byte; remove it");
    }
  }
  return absl::OkStatus();
}

// The components of `rest`, "." and empty ones dropped; ".." refused.
absl::StatusOr<std::vector<absl::string_view>> Components(absl::string_view path,
                                                          absl::string_view rest) {
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("file path \"", path, "\" contains \"..\"; give the path without it"));
    }
    parts.push_back(part);
  }
  return parts;
}

}  // namespace

absl::StatusOr<std::string> SandboxRootRelativePath(absl::string_view path) {
  if (absl::Status text = CheckPathText(path); !text.ok()) return text;
  absl::StatusOr<std::vector<absl::string_view>> parts = Components(path, path);
  if (!parts.ok()) return parts.status();
  std::string rel = absl::StrJoin(*parts, "/");
  if (absl::StartsWith(path, "/")) return rel;
  return rel.empty() ? std::string("workspace") : absl::StrCat("workspace/", rel);
}

absl::StatusOr<std::string> WorkspaceRelativePath(absl::string_view path) {
  if (absl::Status text = CheckPathText(path); !text.ok()) return text;
  absl::string_view rest = path;
  if (absl::StartsWith(rest, "/")) {
    if (rest != "/workspace" && !absl::StartsWith(rest, "/workspace/")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "file path \"", path, "\" is outside /workspace; give a path under /workspace"));
    }
    rest.remove_prefix(sizeof("/workspace") - 1);
  }
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "file path \"", path, "\" contains \"..\"; give a path under /workspace without it"));
    }
    parts.push_back(part);
  }
  return absl::StrJoin(parts, "/");
}

}  // namespace moat::agent
