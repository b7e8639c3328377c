// The edge where policy text becomes a PolicyLayer. YAML (yaml-cpp) and JSON (nlohmann) are both
// turned into one ordered JSON tree, and one schema walker validates that tree, so both formats
// accept exactly the same documents. Parser exceptions stop here and become Status values with
// line numbers. ParsePolicyText and ParsePolicyFile (declared in policy.h) are built from these.
#pragma once

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "sandbox/policy/policy.h"
#include "util/strict_json.h"

namespace moat::sandbox {

using PolicyTree = nlohmann::ordered_json;  // ordered: env keeps the order it was written in

// Key path ("limits.memory", "network.allowedDomains[2]") -> 1-based line, for YAML documents.
using LineMap = absl::flat_hash_map<std::string, int>;

// Limits on what a policy document may contain: it comes from a cloned repository, so a huge or
// alias-bombed file must fail fast instead of exhausting memory.
inline constexpr size_t kMaxPolicyFileBytes = 1 << 20;
inline constexpr int kMaxPolicyDepth = kMaxJsonDepth;  // YAML as JSON (util/strict_json.h)
inline constexpr size_t kMaxPolicyNodes = 100000;

// Strict JSON: no comments, no trailing text, no duplicate keys, valid UTF-8.
absl::StatusOr<PolicyTree> ParseJsonPolicyTree(absl::string_view text, absl::string_view source);

// One YAML document. Only the YAML 1.2 JSON-schema literals are typed: plain true/false become
// booleans and plain null/~ (or an empty value) become null; every other scalar, numbers included,
// stays a string (so "01234" keeps its zero and "yes" is not a boolean), and the walker parses
// numbers itself. Duplicate keys and tags other than !!str/!!map/!!seq are errors. Records the
// line of every key and list item in `lines` if it is not null.
absl::StatusOr<PolicyTree> ParseYamlPolicyTree(absl::string_view text, absl::string_view source,
                                               LineMap* lines);

// The schema walker: validates `tree` against moat's keys and sandbox-runtime's (see
// policy_file.cc for how each srt key is treated) and resolves paths with `paths`.
absl::StatusOr<PolicyLayer> PolicyLayerFromTree(const PolicyTree& tree, absl::string_view source,
                                                const LineMap* lines, const PathContext& paths);

// Reads a policy file: a regular file (opened without blocking, so a FIFO cannot hang the run)
// of at most kMaxPolicyFileBytes. A missing file is a NotFound status.
absl::StatusOr<std::string> ReadPolicyFile(const std::string& path);

}  // namespace moat::sandbox
