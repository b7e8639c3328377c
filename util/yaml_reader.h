// Strict reading of YAML configuration files, shared by moat-agent's and moat-controller's
// configs: every accessor checks the node's type and range, and every error names the file, the
// line and the key, and says what to write instead.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "util/status_macros.h"
#include "util/units.h"
#include "yaml-cpp/yaml.h"

namespace moat {

// Reads one YAML document, checking keys and types; every error names file, line and key.
class YamlReader {
 public:
  explicit YamlReader(absl::string_view source) : source_(source) {}

  absl::Status Error(const YAML::Node& node, absl::string_view key, absl::string_view what) const {
    std::string where(source_);
    if (node.IsDefined() && node.Mark().line >= 0)
      absl::StrAppend(&where, ":", node.Mark().line + 1);
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", key, "\" ", what));
  }

  absl::Status CheckMap(const YAML::Node& node, absl::string_view key,
                        const std::set<std::string>& allowed) const {
    if (!node.IsDefined() || !node.IsMap())
      return Error(node, key, "must be a mapping of keys to values");
    // yaml-cpp keeps both of two equal keys and node[key] answers the first: refused instead,
    // as policy files refuse them, so what is read is what was meant.
    std::set<std::string> seen;
    for (const auto& kv : node) {
      std::string name = kv.first.Scalar();
      std::string full = key.empty() ? name : absl::StrCat(key, ".", name);
      if (!allowed.contains(name)) {
        return Error(kv.first, full,
                     absl::StrCat("is not a known key; remove it or use one of: ",
                                  absl::StrJoin(allowed, ", ")));
      }
      if (!seen.insert(name).second) return Error(kv.first, full, "appears twice; keep one");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> String(const YAML::Node& node, absl::string_view key) const {
    if (!node.IsDefined() || !node.IsScalar() || node.Scalar().empty()) {
      return Error(node, key, "must be a non-empty string");
    }
    return node.Scalar();
  }

  absl::StatusOr<std::string> AbsolutePath(const YAML::Node& node, absl::string_view key) const {
    ASSIGN_OR_RETURN(std::string path, String(node, key));
    if (path[0] != '/') return Error(node, key, "must be an absolute path (starting with /)");
    return path;
  }

  absl::StatusOr<int64_t> Int(const YAML::Node& node, absl::string_view key, int64_t min,
                              int64_t max) const {
    int64_t value = 0;
    if (!node.IsDefined() || !node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &value) ||
        value < min || value > max) {
      return Error(node, key, absl::StrCat("must be a whole number from ", min, " to ", max));
    }
    return value;
  }

  absl::StatusOr<double> Number(const YAML::Node& node, absl::string_view key, double min,
                                double max) const {
    double value = 0;
    if (!node.IsDefined() || !node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &value) ||
        !(value >= min) || !(value <= max)) {
      return Error(node, key, absl::StrCat("must be a number from ", min, " to ", max));
    }
    return value;
  }

  absl::StatusOr<absl::Duration> Duration(const YAML::Node& node, absl::string_view key,
                                          absl::Duration min, absl::Duration max) const {
    // The one duration parser (util/units.h), as in policies and flags.
    absl::StatusOr<absl::Duration> value = node.IsDefined() && node.IsScalar()
                                               ? ParseDuration(node.Scalar())
                                               : absl::InvalidArgumentError("");
    if (!value.ok() || *value < min || *value > max) {
      return Error(node, key,
                   absl::StrCat("must be a duration such as \"5s\", \"500ms\" or \"30m\", from ",
                                absl::FormatDuration(min), " to ", absl::FormatDuration(max)));
    }
    return *value;
  }

  absl::StatusOr<uint64_t> Bytes(const YAML::Node& node, absl::string_view key) const {
    // The one size parser (util/units.h): binary, as in policies and flags.
    if (!node.IsDefined() || !node.IsScalar()) {
      return Error(node, key, "must be a size such as \"512M\", \"1G\" or a number of bytes");
    }
    absl::StatusOr<uint64_t> value = ParseSize(node.Scalar());
    if (!value.ok())
      return Error(node, key, absl::StrCat("must be a size: ", value.status().message()));
    return *value;
  }

 private:
  absl::string_view source_;
};

// Loads one YAML document and walks it with `walk(reader, root)` (which returns StatusOr<T>); a
// syntax error names the file and line, as the walker's errors do.
template <typename T, typename Walk>
absl::StatusOr<T> ParseYamlDocument(absl::string_view yaml, absl::string_view source, Walk walk) {
  YamlReader reader(source);
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    return walk(reader, root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", e.mark.line + 1, ": not valid YAML (", e.msg, "); fix the syntax"));
  }
}

}  // namespace moat
