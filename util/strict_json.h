// The one strict reader of JSON that comes from outside: policy files, the agent's node and execd
// API bodies, the controller's API bodies. Stricter than nlohmann's DOM parser, which silently
// keeps the last of two equal keys: no comments or trailing text, valid UTF-8, duplicate keys
// refused, nesting at most kMaxJsonDepth (checked while parsing, so a client's deep document never
// recurses anywhere). Errors name the place: `duplicate key "limits.memory"`, `parse error at line
// 2, column 3: ...`, `nested more than 32 levels deep`.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moat {

inline constexpr int kMaxJsonDepth = 32;

// Instantiated for nlohmann::json and nlohmann::ordered_json.
template <typename Json>
absl::StatusOr<Json> ParseStrictJson(absl::string_view text);

// Key paths as errors name them: "limits.memory", "network.allowedDomains[2]".
std::string JsonChildPath(absl::string_view parent, absl::string_view key);
std::string JsonItemPath(absl::string_view parent, size_t index);

}  // namespace moat
