#include "sandbox/policy/policy_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "sandbox/values/domain_pattern.h"
#include "util/errno_status.h"
#include "util/status_macros.h"
#include "util/strict_json.h"
#include "util/unique_fd.h"
#include "util/units.h"
#include "yaml-cpp/yaml.h"

namespace moat::sandbox {
namespace {

using Json = PolicyTree;

std::string FileLabel(absl::string_view source) {
  return absl::StrCat("policy file ", QuoteForMessage(source));
}

// ---------------------------------------------------------------------------------------------
// YAML: converted node by node into the same tree, recording lines for error messages.

class YamlConverter {
 public:
  explicit YamlConverter(LineMap* lines) : lines_(lines) {}

  // On error returns the message and sets *error_line (1-based, 0 if unknown).
  absl::StatusOr<Json> Convert(const YAML::Node& node, const std::string& path, int depth,
                               int* error_line) {
    auto fail = [&](absl::string_view message) {
      *error_line = node.Mark().is_null() ? 0 : node.Mark().line + 1;
      return absl::InvalidArgumentError(message);
    };
    if (++nodes_ > kMaxPolicyNodes) {
      return fail(
          absl::StrCat("more than ", kMaxPolicyNodes, " values (are YAML aliases expanding it?)"));
    }
    if (depth > kMaxPolicyDepth) {
      return fail(absl::StrCat("nested more than ", kMaxPolicyDepth, " levels deep"));
    }
    const std::string& tag = node.Tag();
    switch (node.Type()) {
      case YAML::NodeType::Null:
        return Json(nullptr);
      case YAML::NodeType::Scalar: {
        if (tag == "!" || tag == "tag:yaml.org,2002:str") return Json(node.Scalar());
        if (tag != "?") return fail(absl::StrCat("unsupported YAML tag ", QuoteForMessage(tag)));
        const std::string& text = node.Scalar();
        // Plain scalars: only the JSON-schema literals are typed; see policy_file.h.
        if (text == "true") return Json(true);
        if (text == "false") return Json(false);
        if (text == "null" || text == "~") return Json(nullptr);
        return Json(text);
      }
      case YAML::NodeType::Sequence: {
        if (!IsCollectionTag(tag, "seq")) {
          return fail(absl::StrCat("unsupported YAML tag ", QuoteForMessage(tag)));
        }
        Json array = Json::array();
        size_t index = 0;
        for (const YAML::Node& item : node) {
          std::string item_path = JsonItemPath(path, index++);
          Record(item_path, item.Mark());
          ASSIGN_OR_RETURN(Json value, Convert(item, item_path, depth + 1, error_line));
          array.push_back(std::move(value));
        }
        return array;
      }
      case YAML::NodeType::Map: {
        if (!IsCollectionTag(tag, "map")) {
          return fail(absl::StrCat("unsupported YAML tag ", QuoteForMessage(tag)));
        }
        Json object = Json::object();
        for (const auto& pair : node) {
          const YAML::Node& key = pair.first;
          if (!key.IsScalar()) {
            *error_line = key.Mark().is_null() ? 0 : key.Mark().line + 1;
            return absl::InvalidArgumentError("keys must be plain text, not lists or mappings");
          }
          std::string child = JsonChildPath(path, key.Scalar());
          if (object.contains(key.Scalar())) {
            *error_line = key.Mark().is_null() ? 0 : key.Mark().line + 1;
            return absl::InvalidArgumentError(
                absl::StrCat("duplicate key ", QuoteForMessage(child)));
          }
          Record(child, key.Mark());
          ASSIGN_OR_RETURN(Json value, Convert(pair.second, child, depth + 1, error_line));
          object[key.Scalar()] = std::move(value);
        }
        return object;
      }
      case YAML::NodeType::Undefined:
        break;
    }
    return fail("undefined YAML node");
  }

 private:
  static bool IsCollectionTag(const std::string& tag, absl::string_view kind) {
    return tag.empty() || tag == "?" || tag == "!" ||
           tag == absl::StrCat("tag:yaml.org,2002:", kind);
  }

  void Record(const std::string& path, const YAML::Mark& mark) {
    if (lines_ != nullptr && !mark.is_null()) lines_->insert_or_assign(path, mark.line + 1);
  }

  LineMap* lines_;
  size_t nodes_ = 0;
};

// YAML forbids NUL and most control bytes; refusing them here gives a clear message and line.
absl::Status CheckYamlBytes(absl::string_view text, absl::string_view source) {
  int line = 1;
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') ++line;
    if (c >= 0x20 || c == '\n' || c == '\r' || c == '\t') continue;
    return absl::InvalidArgumentError(absl::StrCat(FileLabel(source), ", line ", line,
                                                   ": contains a ", c == 0 ? "NUL" : "control",
                                                   " byte, which YAML does not allow"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// The schema walker.

// How a sandbox-runtime (srt) key that moat does not implement is treated. Ignoring a key is
// only allowed where ignoring it cannot make the sandbox weaker than the file's author expects.
enum class Compat {
  kIgnore,     // cosmetic, or configures srt's own host-side tools; cannot widen moat
  kFalseOnly,  // a boolean that widens the sandbox when true: false (srt's default) is accepted
  kTrueOnly,   // a boolean that disables the sandbox when false
  kEmptyOnly,  // a list that widens the sandbox when not empty
  kRefuse,     // not implemented and not harmless to ignore: always an error
};

enum class Shape { kAny, kBool, kList, kObject, kString, kNumber };

struct CompatKey {
  absl::string_view name;
  Compat compat;
  Shape shape;
  absl::string_view why;  // for kIgnore: why ignoring is safe; otherwise: why it is refused
};

// srt's SandboxRuntimeConfig top level, plus Pi's "enabled".
constexpr CompatKey kTopLevelCompat[] = {
    {"enabled", Compat::kTrueOnly, Shape::kBool, "moat does not support disabling the sandbox"},
    {"credentials", Compat::kRefuse, Shape::kAny,
     "credential masking is not implemented; list credential files under filesystem.denyRead"},
    {"ignoreViolations", Compat::kIgnore, Shape::kObject, "only silences srt's violation reports"},
    {"enableWeakerNestedSandbox", Compat::kFalseOnly, Shape::kBool, "it would weaken the sandbox"},
    {"enableWeakerNetworkIsolation", Compat::kFalseOnly, Shape::kBool,
     "it would open a host service to sandboxed code"},
    {"allowAppleEvents", Compat::kFalseOnly, Shape::kBool,
     "it would let sandboxed code start programs outside the sandbox"},
    {"allowPty", Compat::kFalseOnly, Shape::kBool, "it would widen terminal access"},
    {"ripgrep", Compat::kIgnore, Shape::kObject, "names srt's host-side search tool"},
    {"mandatoryDenySearchDepth", Compat::kIgnore, Shape::kNumber,
     "tunes srt's search for protected files; moat protects fixed paths instead"},
    {"seccomp", Compat::kIgnore, Shape::kObject,
     "locates srt's seccomp helper; moat always applies its own filter"},
    {"bwrapPath", Compat::kIgnore, Shape::kString, "moat does not use bubblewrap"},
    {"socatPath", Compat::kIgnore, Shape::kString, "moat does not use socat"},
    {"windows", Compat::kIgnore, Shape::kObject, "Windows-only settings"},
    {"git", Compat::kIgnore, Shape::kObject, "only marks safe.directory entries, grants nothing"},
};

constexpr CompatKey kNetworkCompat[] = {
    {"deniedDomainReasons", Compat::kIgnore, Shape::kObject, "only explains denials"},
    {"strictAllowlist", Compat::kIgnore, Shape::kBool,
     "moat never asks: hosts outside allowedDomains are always denied"},
    {"allowAllDomains", Compat::kFalseOnly, Shape::kBool, "it would allow every domain"},
    {"allowUnixSockets", Compat::kEmptyOnly, Shape::kList,
     "it would let sandboxed code reach host sockets"},
    {"allowAllUnixSockets", Compat::kFalseOnly, Shape::kBool,
     "it would let sandboxed code reach host sockets"},
    {"allowLocalBinding", Compat::kFalseOnly, Shape::kBool,
     "it would let sandboxed code listen on local ports"},
    {"allowMachLookup", Compat::kEmptyOnly, Shape::kList,
     "it would open macOS services to sandboxed code"},
    {"httpProxyPort", Compat::kRefuse, Shape::kAny,
     "moat filters egress with its own proxy, and an external one would bypass it"},
    {"socksProxyPort", Compat::kRefuse, Shape::kAny,
     "moat filters egress with its own proxy, and an external one would bypass it"},
    {"mitmProxy", Compat::kRefuse, Shape::kAny, "routing through a host socket is not supported"},
    {"tlsTerminate", Compat::kRefuse, Shape::kAny, "TLS interception is not implemented"},
    {"parentProxy", Compat::kRefuse, Shape::kAny, "upstream proxies are not implemented"},
    {"filterRequest", Compat::kRefuse, Shape::kAny, "request callbacks exist only in srt's API"},
};

constexpr CompatKey kFilesystemCompat[] = {
    {"disabled", Compat::kFalseOnly, Shape::kBool, "it would turn off the filesystem restrictions"},
    {"allowRead", Compat::kEmptyOnly, Shape::kList,
     "it would re-allow reading inside denied paths"},
    {"allowGitConfig", Compat::kFalseOnly, Shape::kBool,
     "moat keeps .git/config read-only, since writing it can run code outside the sandbox"},
};

absl::string_view ShapeName(Shape shape) {
  switch (shape) {
    case Shape::kBool:
      return "true or false";
    case Shape::kList:
      return "a list";
    case Shape::kObject:
      return "a mapping";
    case Shape::kString:
      return "a string";
    case Shape::kNumber:
      return "a number";
    case Shape::kAny:
      break;
  }
  return "a value";
}

bool HasShape(const Json& value, Shape shape) {
  switch (shape) {
    case Shape::kBool:
      return value.is_boolean();
    case Shape::kList:
      return value.is_array();
    case Shape::kObject:
      return value.is_object();
    case Shape::kString:
      return value.is_string();
    case Shape::kNumber:
      // YAML numbers arrive as strings (see ParseYamlPolicyTree).
      return value.is_number() || value.is_string();
    case Shape::kAny:
      return true;
  }
  return false;
}

class Walker {
 public:
  Walker(absl::string_view source, const LineMap* lines, const PathContext& paths,
         PolicyLayer* layer)
      : source_(source), lines_(lines), paths_(paths), layer_(layer) {}

  absl::Status Root(const Json& root) {
    if (root.is_null()) return absl::OkStatus();  // an empty YAML file
    if (!root.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(FileLabel(source_),
                       ": the top level must be a mapping with keys such as network, "
                       "filesystem, limits and env"));
    }
    for (const auto& [key, value] : root.items()) {
      if (key == "network") {
        RETURN_IF_ERROR(Network(key, value));
      } else if (key == "filesystem") {
        RETURN_IF_ERROR(Filesystem(key, value));
      } else if (key == "limits") {
        RETURN_IF_ERROR(LimitsSection(key, value));
      } else if (key == "env") {
        RETURN_IF_ERROR(Env(key, value));
      } else {
        RETURN_IF_ERROR(
            CompatOrUnknown(kTopLevelCompat, key, value, "network, filesystem, limits, env"));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Fail(absl::string_view key, absl::string_view message) const {
    std::string where = FileLabel(source_);
    if (lines_ != nullptr) {
      if (auto it = lines_->find(std::string(key)); it != lines_->end()) {
        absl::StrAppend(&where, ", line ", it->second);
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": key ", QuoteForMessage(key), ": ", message));
  }

  // Sections may be empty (a YAML key with everything under it commented out).
  absl::Status CheckSection(absl::string_view key, const Json& value) const {
    if (value.is_null() || value.is_object()) return absl::OkStatus();
    return Fail(key, "must be a mapping");
  }

  absl::Status CompatOrUnknown(absl::Span<const CompatKey> table, const std::string& path,
                               const Json& value, absl::string_view known) const {
    absl::string_view name = path;
    if (size_t dot = name.rfind('.'); dot != absl::string_view::npos) name.remove_prefix(dot + 1);
    const CompatKey* entry = nullptr;
    for (const CompatKey& candidate : table) {
      if (candidate.name == name) entry = &candidate;
    }
    if (entry == nullptr) return Fail(path, absl::StrCat("unknown key; expected one of: ", known));
    if (value.is_null()) return Fail(path, "has no value; remove it");
    if (!HasShape(value, entry->shape)) {
      return Fail(path, absl::StrCat("must be ", ShapeName(entry->shape)));
    }
    auto unsupported = [&](absl::string_view remedy) {
      return Fail(path, absl::StrCat("moat does not support this sandbox-runtime setting: ",
                                     entry->why, "; ", remedy));
    };
    switch (entry->compat) {
      case Compat::kIgnore:
        return absl::OkStatus();
      case Compat::kFalseOnly:
        return value.get<bool>() ? unsupported("remove it or set it to false") : absl::OkStatus();
      case Compat::kTrueOnly:
        return value.get<bool>()
                   ? absl::OkStatus()
                   : Fail(path, absl::StrCat(entry->why, "; remove it or set it to true"));
      case Compat::kEmptyOnly:
        return value.empty() ? absl::OkStatus() : unsupported("remove it or leave the list empty");
      case Compat::kRefuse:
        return unsupported("remove it");
    }
    return unsupported("remove it");
  }

  absl::Status Network(const std::string& path, const Json& section) {
    RETURN_IF_ERROR(CheckSection(path, section));
    if (section.is_null()) return absl::OkStatus();
    for (const auto& [key, value] : section.items()) {
      std::string child = JsonChildPath(path, key);
      if (key == "allowedDomains") {
        RETURN_IF_ERROR(
            DomainList(child, value, DomainPattern::ListKind::kAllow, &layer_->allowed_domains));
      } else if (key == "deniedDomains") {
        RETURN_IF_ERROR(
            DomainList(child, value, DomainPattern::ListKind::kDeny, &layer_->denied_domains));
      } else if (key == "allowedCidrs") {
        ASSIGN_OR_RETURN(layer_->allowed_cidrs, CheckedStrings(child, value, NormaliseCidr));
      } else if (key == "dnsServers") {
        ASSIGN_OR_RETURN(layer_->dns_servers, CheckedStrings(child, value, NormaliseDnsServer));
      } else if (key == "maxRequestBodyBytes") {
        ASSIGN_OR_RETURN(layer_->max_request_body_bytes,
                         Size(child, value, ValidateRequestBodyCap));
      } else if (key == "requestsPerMinute") {
        ASSIGN_OR_RETURN(layer_->requests_per_minute,
                         Count(child, value, ValidateRequestsPerMinute));
      } else if (key == "transparent") {
        ASSIGN_OR_RETURN(layer_->transparent, Bool(child, value));
      } else {
        RETURN_IF_ERROR(CompatOrUnknown(kNetworkCompat, child, value,
                                        "allowedDomains, deniedDomains, allowedCidrs, dnsServers, "
                                        "maxRequestBodyBytes, requestsPerMinute, transparent"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Filesystem(const std::string& path, const Json& section) {
    RETURN_IF_ERROR(CheckSection(path, section));
    if (section.is_null()) return absl::OkStatus();
    for (const auto& [key, value] : section.items()) {
      std::string child = JsonChildPath(path, key);
      if (key == "denyRead") {
        RETURN_IF_ERROR(PathList(child, value, &layer_->deny_read, &layer_->deny_read_patterns));
      } else if (key == "allowWrite") {
        RETURN_IF_ERROR(PathList(child, value, &layer_->allow_write));
      } else if (key == "denyWrite") {
        RETURN_IF_ERROR(PathList(child, value, &layer_->deny_write, &layer_->deny_write_patterns));
      } else if (key == "hideHome") {
        ASSIGN_OR_RETURN(layer_->hide_home, Bool(child, value));
      } else {
        RETURN_IF_ERROR(CompatOrUnknown(kFilesystemCompat, child, value,
                                        "denyRead, allowWrite, denyWrite, hideHome"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status LimitsSection(const std::string& path, const Json& section) {
    RETURN_IF_ERROR(CheckSection(path, section));
    if (section.is_null()) return absl::OkStatus();
    for (const auto& [key, value] : section.items()) {
      std::string child = JsonChildPath(path, key);
      if (key == "memory") {
        ASSIGN_OR_RETURN(layer_->memory_bytes, Size(child, value, ValidateMemory));
      } else if (key == "tmpfsSize") {
        ASSIGN_OR_RETURN(layer_->tmpfs_bytes, Size(child, value, ValidateTmpfsSize));
      } else if (key == "pids") {
        ASSIGN_OR_RETURN(layer_->pids, Count(child, value, ValidatePids));
      } else if (key == "cpus") {
        ASSIGN_OR_RETURN(layer_->cpus, Cpus(child, value));
      } else if (key == "cpuTimeout") {
        ASSIGN_OR_RETURN(layer_->cpu_timeout, Timeout(child, value));
      } else if (key == "wallTimeout") {
        ASSIGN_OR_RETURN(layer_->wall_timeout, Timeout(child, value));
      } else {
        return Fail(child,
                    "unknown key; expected one of: memory, pids, cpus, cpuTimeout, wallTimeout, "
                    "tmpfsSize");
      }
    }
    return absl::OkStatus();
  }

  absl::Status Env(const std::string& path, const Json& section) {
    RETURN_IF_ERROR(CheckSection(path, section));
    if (section.is_null()) return absl::OkStatus();
    for (const auto& [name, value] : section.items()) {
      std::string child = JsonChildPath(path, name);
      std::string text;
      if (value.is_string()) {
        text = value.get<std::string>();
      } else if (value.is_number_integer()) {  // JSON integers; signed or unsigned
        text = value.dump();
      } else if (value.is_boolean()) {
        text = value.get<bool>() ? "true" : "false";
      } else {
        // Floats would come back reformatted (1.10 -> 1.1); null is probably a mistake.
        return Fail(child, "must be a string; quote the value");
      }
      if (absl::Status s = ValidateEnvVar(name, text); !s.ok()) return Fail(child, s.message());
      layer_->env.emplace_back(name, std::move(text));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> Strings(const std::string& path, const Json& value) {
    if (value.is_null()) return Fail(path, "has no value; write [] for an empty list");
    if (!value.is_array()) return Fail(path, "must be a list of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_string()) return Fail(JsonItemPath(path, i), "must be a string");
      out.push_back(value[i].get<std::string>());
    }
    return out;
  }

  absl::Status DomainList(const std::string& path, const Json& value, DomainPattern::ListKind kind,
                          std::optional<std::vector<std::string>>* out) {
    ASSIGN_OR_RETURN(std::vector<std::string> texts, Strings(path, value));
    std::vector<std::string> domains;
    for (size_t i = 0; i < texts.size(); ++i) {
      absl::StatusOr<DomainPattern> pattern = DomainPattern::Parse(texts[i], kind);
      if (!pattern.ok()) return Fail(JsonItemPath(path, i), pattern.status().message());
      domains.push_back(pattern->ToString());
    }
    *out = std::move(domains);
    return absl::OkStatus();
  }

  // A list of strings, each checked and normalised by `normalise`.
  absl::StatusOr<std::vector<std::string>> CheckedStrings(
      const std::string& path, const Json& value,
      absl::StatusOr<std::string> (*normalise)(absl::string_view)) {
    ASSIGN_OR_RETURN(std::vector<std::string> texts, Strings(path, value));
    std::vector<std::string> out;
    for (size_t i = 0; i < texts.size(); ++i) {
      absl::StatusOr<std::string> item = normalise(texts[i]);
      if (!item.ok()) return Fail(JsonItemPath(path, i), item.status().message());
      out.push_back(*std::move(item));
    }
    return out;
  }

  // A list of paths; with `patterns`, entries with glob characters go there (PathPattern).
  absl::Status PathList(const std::string& path, const Json& value,
                        std::optional<std::vector<std::string>>* out,
                        std::optional<std::vector<std::string>>* patterns = nullptr) {
    ASSIGN_OR_RETURN(std::vector<std::string> texts, Strings(path, value));
    std::vector<std::string> resolved, globs;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (patterns != nullptr && IsPathPattern(texts[i])) {
        absl::StatusOr<PathPattern> p = ResolvePathPattern(texts[i], paths_);
        if (!p.ok()) return Fail(JsonItemPath(path, i), p.status().message());
        globs.push_back(p->ToString());
        continue;
      }
      absl::StatusOr<std::string> p = ResolvePolicyPath(texts[i], paths_);
      if (!p.ok()) return Fail(JsonItemPath(path, i), p.status().message());
      resolved.push_back(*std::move(p));
    }
    *out = std::move(resolved);
    if (patterns != nullptr && !globs.empty()) *patterns = std::move(globs);
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Bool(const std::string& path, const Json& value) {
    if (!value.is_boolean()) return Fail(path, "must be true or false");
    return value.get<bool>();
  }

  // The text of a number or string value; YAML numbers arrive as strings.
  absl::StatusOr<std::string> ScalarText(const std::string& path, const Json& value,
                                         absl::string_view example) {
    if (value.is_string()) return value.get<std::string>();
    if (value.is_number()) return value.dump();
    return Fail(path, absl::StrCat("must be a number or a string such as ", example));
  }

  absl::StatusOr<uint64_t> Size(const std::string& path, const Json& value,
                                absl::Status (*validate)(uint64_t)) {
    ASSIGN_OR_RETURN(std::string text, ScalarText(path, value, "\"512M\""));
    absl::StatusOr<uint64_t> bytes = ParseSize(text);
    if (!bytes.ok()) return Fail(path, bytes.status().message());
    if (absl::Status s = validate(*bytes); !s.ok()) return Fail(path, s.message());
    return *bytes;
  }

  // A whole number (process count, requests per minute), checked by `validate`.
  absl::StatusOr<uint64_t> Count(const std::string& path, const Json& value,
                                 absl::Status (*validate)(uint64_t)) {
    ASSIGN_OR_RETURN(std::string text, ScalarText(path, value, "256"));
    uint64_t n = 0;
    bool digits = !text.empty() && text.size() <= 20 &&
                  std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
    if (!digits || !absl::SimpleAtoi(text, &n)) {
      return Fail(path, absl::StrCat("invalid number ", QuoteForMessage(text),
                                     " (use a whole number, e.g. 256)"));
    }
    if (absl::Status s = validate(n); !s.ok()) return Fail(path, s.message());
    return n;
  }

  absl::StatusOr<double> Cpus(const std::string& path, const Json& value) {
    ASSIGN_OR_RETURN(std::string text, ScalarText(path, value, "\"0.5\""));
    absl::StatusOr<double> cpus = ParseCpus(text);
    if (!cpus.ok()) return Fail(path, cpus.status().message());
    return *cpus;
  }

  absl::StatusOr<absl::Duration> Timeout(const std::string& path, const Json& value) {
    ASSIGN_OR_RETURN(std::string text, ScalarText(path, value, "\"30s\""));
    absl::StatusOr<absl::Duration> duration = ParseDuration(text);
    if (!duration.ok()) return Fail(path, duration.status().message());
    if (absl::Status s = ValidateTimeout(*duration); !s.ok()) return Fail(path, s.message());
    return *duration;
  }

  absl::string_view source_;
  const LineMap* lines_;
  const PathContext& paths_;
  PolicyLayer* layer_;
};

}  // namespace

absl::StatusOr<PolicyTree> ParseJsonPolicyTree(absl::string_view text, absl::string_view source) {
  absl::StatusOr<PolicyTree> tree = ParseStrictJson<PolicyTree>(text);
  if (!tree.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(FileLabel(source), ": invalid JSON: ", tree.status().message()));
  }
  return tree;
}

absl::StatusOr<PolicyTree> ParseYamlPolicyTree(absl::string_view text, absl::string_view source,
                                               LineMap* lines) {
  RETURN_IF_ERROR(CheckYamlBytes(text, source));
  try {
    std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    if (documents.empty()) return Json(nullptr);
    if (documents.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(FileLabel(source), ": contains ", documents.size(),
                       " YAML documents; a policy is a single document"));
    }
    YamlConverter converter(lines);
    int error_line = 0;
    absl::StatusOr<Json> tree = converter.Convert(documents[0], "", 0, &error_line);
    if (!tree.ok()) {
      std::string where = FileLabel(source);
      if (error_line > 0) absl::StrAppend(&where, ", line ", error_line);
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", tree.status().message()));
    }
    return tree;
  } catch (const YAML::Exception& e) {
    std::string where = FileLabel(source);
    if (!e.mark.is_null()) {
      absl::StrAppend(&where, ", line ", e.mark.line + 1, ", column ", e.mark.column + 1);
    }
    return absl::InvalidArgumentError(absl::StrCat(where, ": invalid YAML: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(FileLabel(source), ": invalid YAML: ", e.what()));
  }
}

absl::StatusOr<PolicyLayer> PolicyLayerFromTree(const PolicyTree& tree, absl::string_view source,
                                                const LineMap* lines, const PathContext& paths) {
  PolicyLayer layer;
  layer.source = std::string(source);
  Walker walker(source, lines, paths, &layer);
  RETURN_IF_ERROR(walker.Root(tree));
  return layer;
}

absl::StatusOr<std::string> ReadPolicyFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO planted in a repository must not wait for a writer.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) return ErrnoStatus(absl::StrCat("open policy file ", QuoteForMessage(path)));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return ErrnoStatus(absl::StrCat("stat policy file ", QuoteForMessage(path)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        FileLabel(path), " is not a regular file; point moat at a YAML or JSON policy file"));
  }
  auto too_large = [&] {
    return absl::FailedPreconditionError(absl::StrCat(
        FileLabel(path), " is larger than ", kMaxPolicyFileBytes, " bytes; a policy is small"));
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxPolicyFileBytes) return too_large();
  std::string text;
  char buffer[16384];
  while (true) {
    ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StrCat("read policy file ", QuoteForMessage(path)));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxPolicyFileBytes) return too_large();  // it grew while being read
  }
  return text;
}

absl::StatusOr<PolicyLayer> ParsePolicyText(absl::string_view text, absl::string_view source,
                                            bool is_json, const PathContext& paths) {
  if (text.size() > kMaxPolicyFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(FileLabel(source), " is larger than ", kMaxPolicyFileBytes, " bytes"));
  }
  if (is_json) {
    ASSIGN_OR_RETURN(PolicyTree tree, ParseJsonPolicyTree(text, source));
    return PolicyLayerFromTree(tree, source, nullptr, paths);
  }
  LineMap lines;
  ASSIGN_OR_RETURN(PolicyTree tree, ParseYamlPolicyTree(text, source, &lines));
  return PolicyLayerFromTree(tree, source, &lines, paths);
}

absl::StatusOr<PolicyLayer> ParsePolicyFile(const std::string& path, const PathContext& paths) {
  // Name the file by an absolute path in errors and in Policy::sources.
  std::string full = path;
  if (!absl::StartsWith(path, "/") && absl::StartsWith(paths.cwd, "/")) {
    full = absl::StrCat(paths.cwd, "/", path);
  }
  ASSIGN_OR_RETURN(std::string text, ReadPolicyFile(full));
  bool is_json = absl::EndsWith(absl::AsciiStrToLower(full), ".json");
  return ParsePolicyText(text, full, is_json, paths);
}

}  // namespace moat::sandbox
