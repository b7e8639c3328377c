#include "controller/lifecycle_json.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "controller/scheduler/framework.h"
#include "util/status_macros.h"
#include "util/strict_json.h"
#include "util/token.h"

namespace moat::controller {
namespace {

using nlohmann::json;

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" ", what));
}

// Strict (util/strict_json.h): duplicate keys and deep nesting refused while parsing.
absl::StatusOr<json> ParseObject(absl::string_view body) {
  absl::StatusOr<json> doc = ParseStrictJson<json>(body);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body must be a JSON object (", doc.status().message(), ")"));
  }
  if (!doc->is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  return doc;
}

absl::Status CheckFields(const json& obj, absl::string_view where,
                         const std::set<std::string>& allowed) {
  for (const auto& [key, value] : obj.items()) {
    if (!allowed.contains(key)) {
      return Bad(absl::StrCat(where, key),
                 absl::StrCat("is not a known field; use one of: ", absl::StrJoin(allowed, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> StringMap(const json& j,
                                                             absl::string_view field) {
  if (!j.is_object()) return Bad(field, "must be an object of string values");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) return Bad(absl::StrCat(field, ".", k), "must be a string");
    if (k.empty() || k.size() > 256 || v.get_ref<const std::string&>().size() > 4096) {
      return Bad(field, "keys must be 1 to 256 bytes, values at most 4096");
    }
    out[k] = v.get<std::string>();
  }
  if (out.size() > 128) return Bad(field, "may hold at most 128 entries");
  return out;
}

absl::StatusOr<absl::Time> ParseTime(const json& j, absl::string_view field) {
  absl::Time t;
  std::string err;
  if (!j.is_string() || !absl::ParseTime(absl::RFC3339_full, j.get<std::string>(), &t, &err)) {
    return Bad(field, "must be an RFC 3339 time such as \"2026-12-01T12:00:00Z\"");
  }
  return t;
}

bool IsNodeName(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (!absl::ascii_islower(name[0]) && !absl::ascii_isdigit(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '.' && c != '_' && c != '-')
      return false;
  }
  return true;
}

absl::StatusOr<NodeReport> ParseReport(const json& j) {
  if (!j.is_object()) return Bad("report", "must be an object");
  RETURN_IF_ERROR(
      CheckFields(j, "report.",
                  {"agent_url", "agent_token", "arch", "kernel", "cgroup", "version", "allocatable",
                   "used", "profiles", "profile_limits", "warm", "labels", "taints"}));
  NodeReport r;
  try {
    r.agent_url = j.value("agent_url", "");
    r.agent_token = j.value("agent_token", "");
    r.arch = j.value("arch", "");
    r.kernel = j.value("kernel", "");
    r.cgroup = j.value("cgroup", "");
    r.version = j.value("version", "");
    for (auto [field, out] : {std::pair{"allocatable", &r.allocatable}, {"used", &r.used}}) {
      if (!j.contains(field)) continue;
      const json& res = j[field];
      RETURN_IF_ERROR(
          CheckFields(res, absl::StrCat("report.", field, "."), {"cpu", "memory", "pids"}));
      out->cpu = res.value("cpu", 0.0);
      out->memory = res.value("memory", uint64_t{0});
      out->pids = res.value("pids", uint64_t{0});
    }
    if (j.contains("profiles")) r.profiles = j["profiles"].get<std::vector<std::string>>();
    if (j.contains("profile_limits")) {
      for (const auto& [name, l] : j["profile_limits"].items()) {
        r.profile_limits[name] = {l.value("cpus", 0.0), l.value("memory_bytes", uint64_t{0}), 0};
      }
    }
    if (j.contains("warm")) r.warm = j["warm"].get<std::map<std::string, int>>();
    if (j.contains("labels")) r.labels = j["labels"].get<std::map<std::string, std::string>>();
    if (j.contains("taints")) {
      for (const json& t : j["taints"]) {
        r.taints.push_back({t.at("key").get<std::string>(), t.value("value", "")});
      }
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"report\" has a field of the wrong type: ", e.what()));
  }
  if (!absl::StartsWith(r.agent_url, "http://") && !absl::StartsWith(r.agent_url, "https://")) {
    return Bad("report.agent_url", "must be an http:// or https:// URL of the agent's node API");
  }
  if (r.arch.empty()) return Bad("report.arch", "is required (uname -m)");
  return r;
}

// A domain as OpenSandbox's egress rules and moat's allowedDomains take it: "example.com",
// "*.example.com" (subdomains), lower case letters, digits, '-' and '.', at most 253 bytes.
bool IsDomainTarget(absl::string_view target) {
  absl::string_view rest = target;
  absl::ConsumePrefix(&rest, "*.");
  if (rest.empty() || target.size() > 253 || rest.front() == '.' || rest.back() == '.' ||
      absl::StrContains(rest, "..")) {
    return false;
  }
  for (char c : rest) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && c != '.') return false;
  }
  return true;
}

// networkPolicy -> moat's egress policy. moat's sandboxes have no network unless domains are
// allowed, so defaultAction must be deny (or left out); allow rules become allowedDomains and
// deny rules deniedDomains (in moat a deny wins over any allow: stricter than OpenSandbox's
// first-match order, never looser). No rules: the profile's policy (no network by default).
absl::Status ParseNetworkPolicy(const json& p, Sandbox& s) {
  if (!p.is_object()) return Bad("networkPolicy", "must be {\"defaultAction\", \"egress\"}");
  RETURN_IF_ERROR(CheckFields(p, "networkPolicy.", {"defaultAction", "egress"}));
  if (p.contains("defaultAction") && p["defaultAction"] != "deny") {
    return Bad("networkPolicy.defaultAction",
               "must be \"deny\": moat-controller allows no egress but the domains listed in "
               "egress rules; list them instead of allowing everything");
  }
  if (!p.contains("egress") || p["egress"].is_null()) return absl::OkStatus();
  if (!p["egress"].is_array() || p["egress"].size() > 256) {
    return Bad("networkPolicy.egress", "must be an array of at most 256 rules");
  }
  for (const json& rule : p["egress"]) {
    if (!rule.is_object()) return Bad("networkPolicy.egress", "must hold {action, target} rules");
    RETURN_IF_ERROR(CheckFields(rule, "networkPolicy.egress[].", {"action", "target"}));
    if (!rule.contains("target") || !rule["target"].is_string() ||
        !IsDomainTarget(rule["target"].get<std::string>())) {
      return Bad("networkPolicy.egress[].target",
                 "must be a lower-case domain such as \"example.com\" or \"*.example.com\" "
                 "(IPs and CIDRs are not supported)");
    }
    std::string target = rule["target"].get<std::string>();
    const json& action = rule.contains("action") ? rule["action"] : json();
    if (action == "allow") {
      s.egress_allow.push_back(target);
    } else if (action == "deny") {
      s.egress_deny.push_back(target);
    } else {
      return Bad("networkPolicy.egress[].action", "must be \"allow\" or \"deny\"");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> ParseCpuQuantity(absl::string_view text) {
  double value = 0;
  absl::string_view number = text;
  double scale = 1;
  if (absl::ConsumeSuffix(&number, "m")) scale = 0.001;
  if (number.empty() || number[0] == '-' || number[0] == '+' || !absl::SimpleAtod(number, &value) ||
      !std::isfinite(value) || value <= 0 || value * scale > 1024) {
    return Bad("resourceLimits.cpu",
               "must be cores such as \"1\", \"0.5\" or \"500m\" (at most 1024)");
  }
  return value * scale;
}

absl::StatusOr<uint64_t> ParseMemoryQuantity(absl::string_view text) {
  struct Unit {
    absl::string_view suffix;
    double factor;
  };
  static constexpr Unit kUnits[] = {
      {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
      {"k", 1e3},     {"K", 1e3},        {"M", 1e6},           {"G", 1e9},
      {"T", 1e12}};
  absl::string_view number = text;
  double factor = 1;
  for (const Unit& u : kUnits) {
    if (absl::ConsumeSuffix(&number, u.suffix)) {
      factor = u.factor;
      break;
    }
  }
  double value = 0;
  if (number.empty() || number[0] == '-' || number[0] == '+' || !absl::SimpleAtod(number, &value) ||
      !std::isfinite(value) || value <= 0 || value * factor > 1e15) {
    return Bad("resourceLimits.memory", "must be a size such as \"512Mi\", \"2Gi\" or \"1G\"");
  }
  return static_cast<uint64_t>(value * factor);
}

absl::StatusOr<Sandbox> ParseCreateSandbox(absl::string_view body, const ControllerConfig& config,
                                           absl::Time now) {
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  RETURN_IF_ERROR(CheckFields(doc, "",
                              {"image", "timeout", "resourceLimits", "resourceRequests", "env",
                               "metadata", "entrypoint", "platform", "networkPolicy", "extensions",
                               "secureAccess", "snapshotId", "volumes", "credentialProxy"}));
  for (const char* unsupported : {"snapshotId", "volumes", "credentialProxy"}) {
    if (doc.contains(unsupported) && !doc[unsupported].is_null()) {
      return Bad(unsupported, "is not supported by moat-controller yet; leave it out");
    }
  }
  Sandbox s;
  if (!doc.contains("image") || !doc["image"].is_object()) {
    return Bad("image", "is required: {\"uri\": \"python:3.11\"}");
  }
  const json& image = doc["image"];
  RETURN_IF_ERROR(CheckFields(image, "image.", {"uri", "auth"}));
  if (!image.contains("uri") || !image["uri"].is_string() ||
      image["uri"].get_ref<const std::string&>().empty() ||
      image["uri"].get_ref<const std::string&>().size() > 1024) {
    return Bad("image.uri", "is required and must be a string of 1 to 1024 bytes");
  }
  s.image = image["uri"].get<std::string>();
  s.profile = config.ProfileForImage(s.image);
  if (s.profile.empty()) {
    return Bad("image.uri", absl::StrCat("\"", s.image.substr(0, 100),
                                         "\" matches no entry of the controller's images table; "
                                         "use an image it lists"));
  }
  if (!doc.contains("entrypoint") || !doc["entrypoint"].is_array() || doc["entrypoint"].empty()) {
    return Bad("entrypoint", "is required: a non-empty array of strings");
  }
  for (const json& arg : doc["entrypoint"]) {
    if (!arg.is_string()) return Bad("entrypoint", "must hold only strings");
    s.entrypoint.push_back(arg.get<std::string>());
  }
  s.expires_at = now + config.default_timeout;
  if (doc.contains("timeout")) {
    const json& t = doc["timeout"];
    if (t.is_null()) {
      s.expires_at = absl::InfiniteFuture();
    } else {
      int64_t max = absl::ToInt64Seconds(config.max_timeout);
      if (!t.is_number_integer() || t.get<int64_t>() < 60 || t.get<int64_t>() > max) {
        return Bad("timeout", absl::StrCat("must be whole seconds from 60 to ", max,
                                           ", or null for no expiry"));
      }
      s.expires_at = now + absl::Seconds(t.get<int64_t>());
    }
  }
  // The SDK's default request.
  s.resources = {1, 2ULL << 30, 0};
  if (doc.contains("resourceLimits")) {
    ASSIGN_OR_RETURN(auto limits, StringMap(doc["resourceLimits"], "resourceLimits"));
    for (const auto& [k, v] : limits) {
      if (k == "cpu") {
        ASSIGN_OR_RETURN(s.resources.cpu, ParseCpuQuantity(v));
        s.limit_cpus = s.resources.cpu;
      } else if (k == "memory") {
        ASSIGN_OR_RETURN(s.resources.memory, ParseMemoryQuantity(v));
        s.limit_memory = s.resources.memory;
      } else {
        return Bad(absl::StrCat("resourceLimits.", k),
                   "is not a resource moat schedules; use cpu and memory");
      }
    }
  }
  // Kubernetes' rule: the scheduler reserves the requests when given, else the limits.
  if (doc.contains("resourceRequests") && !doc["resourceRequests"].is_null()) {
    ASSIGN_OR_RETURN(auto requests, StringMap(doc["resourceRequests"], "resourceRequests"));
    for (const auto& [k, v] : requests) {
      if (k == "cpu") {
        ASSIGN_OR_RETURN(s.resources.cpu, ParseCpuQuantity(v));
      } else if (k == "memory") {
        ASSIGN_OR_RETURN(s.resources.memory, ParseMemoryQuantity(v));
      } else {
        return Bad(absl::StrCat("resourceRequests.", k),
                   "is not a resource moat schedules; use cpu and memory");
      }
    }
  }
  if (doc.contains("env")) {
    ASSIGN_OR_RETURN(s.env, StringMap(doc["env"], "env"));
  }
  if (doc.contains("metadata")) {
    ASSIGN_OR_RETURN(s.metadata, StringMap(doc["metadata"], "metadata"));
  }
  if (doc.contains("platform") && !doc["platform"].is_null()) {
    const json& p = doc["platform"];
    if (!p.is_object()) return Bad("platform", "must be {\"os\": \"linux\", \"arch\": \"amd64\"}");
    RETURN_IF_ERROR(CheckFields(p, "platform.", {"os", "arch"}));
    if (p.contains("os") && p["os"] != "linux") return Bad("platform.os", "must be \"linux\"");
    if (p.contains("arch")) {
      if (p["arch"] != "amd64" && p["arch"] != "arm64") {
        return Bad("platform.arch", "must be \"amd64\" or \"arm64\"");
      }
      s.arch = scheduler::NormalizeArch(p["arch"].get<std::string>());
    }
  }
  if (doc.contains("networkPolicy") && !doc["networkPolicy"].is_null()) {
    RETURN_IF_ERROR(ParseNetworkPolicy(doc["networkPolicy"], s));
  }
  return s;
}

absl::StatusOr<std::string> NewSandboxId() {
  ASSIGN_OR_RETURN(std::string hex, NewToken());
  // 32 hex digits as a version-4 UUID: 8-4-4-4-12, version nibble 4, variant 10xx.
  hex[12] = '4';
  hex[16] = "89ab"[hex[16] % 4];
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                      hex.substr(16, 4), "-", hex.substr(20, 12));
}

std::string FormatApiTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

json SandboxJson(const Sandbox& s) {
  json status = {{"state", s.state}, {"lastTransitionAt", FormatApiTime(s.last_transition)}};
  if (!s.reason.empty()) status["reason"] = s.reason;
  if (!s.message.empty()) status["message"] = s.message;
  json out = {{"id", s.id},
              {"image", {{"uri", s.image}}},
              {"status", status},
              {"metadata", s.metadata},
              {"entrypoint", s.entrypoint},
              {"createdAt", FormatApiTime(s.created_at)}};
  if (s.expires_at != absl::InfiniteFuture()) out["expiresAt"] = FormatApiTime(s.expires_at);
  if (!s.arch.empty()) {
    out["platform"] = {{"os", "linux"}, {"arch", s.arch == "aarch64" ? "arm64" : "amd64"}};
  }
  return out;
}

absl::StatusOr<ListQuery> ParseListQuery(const std::multimap<std::string, std::string>& params) {
  ListQuery q;
  for (const auto& [key, value] : params) {
    if (key == "state") {
      for (absl::string_view v : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        q.states.emplace_back(v);
      }
    } else if (key == "metadata") {
      for (absl::string_view pair : absl::StrSplit(value, '&', absl::SkipEmpty())) {
        std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
        if (kv.first.empty()) return Bad("metadata", "must be key=value pairs joined by &");
        q.metadata[kv.first] = kv.second;
      }
    } else if (key == "page") {
      if (!absl::SimpleAtoi(value, &q.page) || q.page < 1) return Bad("page", "must be >= 1");
    } else if (key == "pageSize") {
      if (!absl::SimpleAtoi(value, &q.page_size) || q.page_size < 1 || q.page_size > 200) {
        return Bad("pageSize", "must be from 1 to 200");
      }
    } else {
      return Bad(key, "is not a known query parameter; use state, metadata, page, pageSize");
    }
  }
  return q;
}

json ListJson(const std::vector<Sandbox>& all, const ListQuery& q) {
  std::vector<const Sandbox*> matching;
  for (const Sandbox& s : all) {
    if (!q.states.empty() &&
        std::none_of(q.states.begin(), q.states.end(),
                     [&](const std::string& st) { return absl::EqualsIgnoreCase(st, s.state); })) {
      continue;
    }
    bool ok = true;
    for (const auto& [k, v] : q.metadata) {
      auto it = s.metadata.find(k);
      if (it == s.metadata.end() || it->second != v) ok = false;
    }
    if (ok) matching.push_back(&s);
  }
  int64_t total = static_cast<int64_t>(matching.size());
  int64_t pages = (total + q.page_size - 1) / q.page_size;
  json items = json::array();
  for (int64_t i = int64_t{q.page - 1} * q.page_size;
       i < total && i < int64_t{q.page} * q.page_size; ++i) {
    items.push_back(SandboxJson(*matching[i]));
  }
  return {{"items", items},
          {"pagination",
           {{"page", q.page},
            {"pageSize", q.page_size},
            {"totalItems", total},
            {"totalPages", pages},
            {"hasNextPage", q.page < pages}}}};
}

absl::StatusOr<RunRequest> ParseRunRequest(absl::string_view body, const ControllerConfig& config,
                                           absl::Time now) {
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  RETURN_IF_ERROR(
      CheckFields(doc, "",
                  {"command", "code", "language", "image", "env", "timeout", "expectedDuration",
                   "resourceLimits", "resourceRequests", "networkPolicy", "platform", "metadata"}));
  RunRequest run;
  if (doc.contains("command") == doc.contains("code")) {
    return Bad("command",
               "or \"code\" is required, not both: \"command\": \"echo hi\" (for "
               "/bin/sh -c) or [\"echo\", \"hi\"], or \"code\" with \"language\"");
  }
  if (doc.contains("command")) {
    const json& c = doc["command"];
    if (c.is_string()) {
      run.command.command = c.get<std::string>();
    } else if (c.is_array() && !c.empty()) {
      std::vector<std::string> words;
      for (const json& w : c) {
        if (!w.is_string()) return Bad("command", "must hold only strings");
        words.push_back(w.get<std::string>());
      }
      run.command.command = ExecCommand(words);
    } else {
      return Bad("command", "must be a string (for /bin/sh -c) or a non-empty array of strings");
    }
    if (doc.contains("language")) return Bad("language", "goes with \"code\", not \"command\"");
  } else {
    if (!doc["code"].is_string()) return Bad("code", "must be a string");
    if (doc.contains("language") && !doc["language"].is_string()) {
      return Bad("language", "must be one of python, sh, bash, node");
    }
    const std::string language = doc.value("language", "python");
    static const std::map<std::string, std::string> kInterpreters = {
        {"python", "python3 -c"}, {"sh", "sh -c"}, {"bash", "bash -c"}, {"node", "node -e"}};
    auto it = kInterpreters.find(language);
    if (it == kInterpreters.end()) {
      return Bad("language", "must be one of python, sh, bash, node");
    }
    run.command.command =
        absl::StrCat("exec ", it->second, " ", ShellQuote(doc["code"].get<std::string>()));
    run.scanned = doc["code"].get<std::string>();
    run.language = language;
    run.profile = language == "python" ? "python" : language == "node" ? "javascript" : "shell";
  }
  if (run.profile.empty()) run.profile = "shell";  // A command is a shell command line.
  if (run.scanned.empty()) run.scanned = run.command.command;
  run.command.run_result = true;  // the agent keeps and reports it as moat run would
  if (run.command.command.empty() || run.command.command.size() > 65536) {
    return Bad(doc.contains("code") ? "code" : "command", "must be 1 to 65536 bytes");
  }
  int64_t timeout = 60;
  if (doc.contains("timeout")) {
    int64_t max = absl::ToInt64Seconds(config.max_timeout);
    if (!doc["timeout"].is_number_integer() || doc["timeout"].get<int64_t>() < 1 ||
        doc["timeout"].get<int64_t>() > max) {
      return Bad("timeout", absl::StrCat("must be whole seconds from 1 to ", max));
    }
    timeout = doc["timeout"].get<int64_t>();
    run.timeout = absl::Seconds(timeout);
  }
  run.command.timeout = absl::Seconds(timeout);
  if (doc.contains("expectedDuration")) {
    const json& d = doc["expectedDuration"];
    const double max = absl::ToDoubleSeconds(config.max_declared_duration);
    if (!d.is_number() || d.get<double>() <= 0 || d.get<double>() > max) {
      return Bad("expectedDuration",
                 absl::StrCat("must be seconds, more than 0 and at most ", max,
                              " (max_declared_duration); split longer work into several runs"));
    }
    run.declared = absl::Seconds(d.get<double>());
  }
  // The sandbox: a create's fields, its life the command's timeout (at least a create's 60 s).
  json create = {{"image", doc.contains("image") ? doc["image"] : json{{"uri", "default"}}},
                 {"entrypoint", {"/bin/sh"}},
                 {"timeout", std::max<int64_t>(60, timeout)}};
  for (const char* key :
       {"env", "resourceLimits", "resourceRequests", "networkPolicy", "platform", "metadata"}) {
    if (doc.contains(key)) create[key] = doc[key];
  }
  ASSIGN_OR_RETURN(run.spec, ParseCreateSandbox(create.dump(), config, now));
  return run;
}

absl::Status ApplyRunLimits(RunRequest& run, const RunLimits& limits, absl::Time now) {
  absl::Duration wall = limits.wall;
  if (run.timeout.has_value()) {
    if (*run.timeout > limits.wall) {
      return Bad("timeout",
                 absl::StrCat("is ", absl::FormatDuration(*run.timeout), ", more than the ",
                              limits.language, " profile's wall limit of ",
                              absl::FormatDuration(limits.wall),
                              limits.lowered ? " (lowered: this tenant's recent runs outlasted "
                                               "their expectedDuration)"
                                             : "",
                              "; declare a longer run with \"expectedDuration\" (seconds)"));
    }
    wall = *run.timeout;
  }
  run.limits = limits;
  run.limited = true;
  run.command.timeout = wall;
  // The profile's CPU/wall ratio cap (60 s wall, 15 s CPU: a quarter of a core on average).
  run.command.cpu_timeout = limits.cpu * absl::FDivDuration(wall, limits.wall);
  // The sandbox outlives the run (the agent's own expiry adds its slack on top).
  run.spec.expires_at = now + std::max(absl::Seconds(60), wall + absl::Seconds(30));
  return absl::OkStatus();
}

// The shape of sandbox/output/result.h's ToJson (moat run --json), written here because the
// controller does not depend on the sandbox runtime (scripts/check_layers.py);
// e2e/controller/cli_test compares the two objects' keys.
json RunResultJson(const AgentCommandResult& r) {
  std::string status = "exited";
  json exit_code = nullptr, signal = nullptr;
  json violations = json::array();
  const int code = r.exit_code.value_or(-1);
  if (r.status == "timed_out") {
    status = "wall_timeout";
    signal = 9;
  } else if (r.status == "cpu_timeout") {
    status = "cpu_timeout";
    signal = 9;
  } else if (r.status == "oom_killed") {
    status = "oom_killed";
    signal = 9;
  } else if ((r.status == "signaled" || r.status == "interrupted") && code > 128) {
    status = "signaled";
    signal = code - 128;
  } else {
    exit_code = r.exit_code.value_or(0);
  }
  // In moat run's order (sandbox/runner.cc): the supervisor's (seccomp, as they came), then its
  // memory and pids counts (the run's sandbox is its own, so the sandbox's counts are the
  // run's), then the egress session's network denials.
  for (const auto& [kind, detail] : r.violations) {
    if (kind != "network") violations.push_back({{"kind", kind}, {"detail", detail}});
  }
  const uint64_t oom_kills = r.oom_kills.value_or(r.status == "oom_killed" ? 1 : 0);
  if (oom_kills > 0) {
    violations.push_back(
        {{"kind", "memory"},
         {"detail",
          absl::StrCat(oom_kills, " process(es) killed by the OOM killer at the memory limit")}});
  }
  if (r.pids_limit_hits.value_or(0) > 0) {
    violations.push_back(
        {{"kind", "pids"},
         {"detail", absl::StrCat(*r.pids_limit_hits, " fork(s) refused at the process limit")}});
  }
  for (const auto& [kind, detail] : r.violations) {
    if (kind == "network") violations.push_back({{"kind", kind}, {"detail", detail}});
  }
  json out = {{"status", status},
              {"exit_code", exit_code},
              {"signal", signal},
              {"stdout", r.stdout_text},
              {"stderr", r.stderr_text},
              {"stdout_truncated", r.stdout_truncated},
              {"stderr_truncated", r.stderr_truncated},
              {"wall_seconds", absl::ToDoubleSeconds(r.wall)},
              {"cpu_seconds", r.cpu_seconds.value_or(0.0)},
              {"peak_memory_bytes", r.peak_memory_bytes.value_or(0)},
              {"violations", violations}};
  if (r.violations_dropped.value_or(0) > 0) out["violations_dropped"] = *r.violations_dropped;
  if (!r.cpu_seconds.has_value() || !r.peak_memory_bytes.has_value()) {
    out["notes"] = {
        "the agent did not report the sandbox's cpu_seconds and peak_memory_bytes (0): it is "
        "older than the controller, or its cgroup could not be read"};
  }
  return out;
}

absl::StatusOr<absl::Duration> ParseDrain(absl::string_view body) {
  if (absl::StripAsciiWhitespace(body).empty()) return absl::ZeroDuration();
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  RETURN_IF_ERROR(CheckFields(doc, "", {"gracePeriodSeconds"}));
  if (!doc.contains("gracePeriodSeconds")) return absl::ZeroDuration();
  const json& g = doc["gracePeriodSeconds"];
  if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > 86400) {
    return Bad("gracePeriodSeconds", "must be whole seconds from 0 to 86400");
  }
  return absl::Seconds(g.get<int64_t>());
}

absl::StatusOr<absl::Time> ParseRenew(absl::string_view body) {
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  RETURN_IF_ERROR(CheckFields(doc, "", {"expiresAt"}));
  if (!doc.contains("expiresAt")) return Bad("expiresAt", "is required (RFC 3339)");
  return ParseTime(doc["expiresAt"], "expiresAt");
}

absl::StatusOr<std::map<std::string, std::optional<std::string>>> ParseMetadataPatch(
    absl::string_view body) {
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  std::map<std::string, std::optional<std::string>> patch;
  for (const auto& [k, v] : doc.items()) {
    if (v.is_null()) {
      patch[k] = std::nullopt;
    } else if (v.is_string()) {
      patch[k] = v.get<std::string>();
    } else {
      return Bad(k, "must be a string, or null to remove the key");
    }
  }
  return patch;
}

absl::StatusOr<JoinRequest> ParseJoinRequest(absl::string_view body) {
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  RETURN_IF_ERROR(CheckFields(doc, "", {"name", "nonce", "timestamp", "proof", "report"}));
  JoinRequest j;
  if (!doc.contains("name") || !doc["name"].is_string() ||
      !IsNodeName(doc["name"].get<std::string>())) {
    return Bad("name", "must be 1 to 63 lower-case letters, digits, '.', '_' or '-'");
  }
  j.name = doc["name"].get<std::string>();
  if (!doc.contains("nonce") || !doc["nonce"].is_string() ||
      doc["nonce"].get_ref<const std::string&>().size() < 16) {
    return Bad("nonce", "must be a random string of at least 16 bytes");
  }
  j.nonce = doc["nonce"].get<std::string>();
  if (!doc.contains("timestamp") || !doc["timestamp"].is_number_integer()) {
    return Bad("timestamp", "must be the time in Unix seconds");
  }
  j.timestamp = doc["timestamp"].get<int64_t>();
  if (!doc.contains("proof") || !doc["proof"].is_string()) return Bad("proof", "is required");
  j.proof = doc["proof"].get<std::string>();
  if (!doc.contains("report")) return Bad("report", "is required");
  ASSIGN_OR_RETURN(j.report, ParseReport(doc["report"]));
  j.report.agent_token.clear();  // Only a heartbeat may carry it (after the controller's proof).
  return j;
}

absl::StatusOr<HeartbeatRequest> ParseHeartbeat(absl::string_view body) {
  ASSIGN_OR_RETURN(json doc, ParseObject(body));
  RETURN_IF_ERROR(CheckFields(doc, "", {"report", "away_for_seconds"}));
  if (!doc.contains("report")) return Bad("report", "is required");
  HeartbeatRequest h;
  ASSIGN_OR_RETURN(h.report, ParseReport(doc["report"]));
  if (doc.contains("away_for_seconds")) {
    const json& away = doc["away_for_seconds"];
    if (!away.is_number_integer() || away.get<int64_t>() < 1 || away.get<int64_t>() > 3600) {
      return Bad("away_for_seconds", "must be whole seconds from 1 to 3600");
    }
    h.away = absl::Seconds(away.get<int64_t>());
  }
  return h;
}

json NodeJson(const NodeView& n) {
  json taints = json::array();
  for (const auto& t : n.report.taints) taints.push_back({{"key", t.key}, {"value", t.value}});
  auto resources = [](const scheduler::Resources& r) {
    return json{{"cpu", r.cpu}, {"memory", r.memory}, {"pids", r.pids}};
  };
  return {{"name", n.name},
          {"state", std::string(scheduler::NodeStateName(n.state))},
          {"cordoned", n.cordoned},
          {"draining", n.draining},
          {"arch", n.report.arch},
          {"kernel", n.report.kernel},
          {"cgroup", n.report.cgroup},
          {"version", n.report.version},
          {"agentUrl", n.report.agent_url},
          {"labels", n.report.labels},
          {"taints", taints},
          {"profiles", n.report.profiles},
          {"warm", n.report.warm},
          {"allocatable", resources(n.report.allocatable)},
          {"used", resources(n.report.used)},
          {"allocated", resources(n.allocated)},
          {"sandboxes", n.sandboxes},
          {"joinedAt", FormatApiTime(n.joined_at)},
          {"lastHeartbeat", FormatApiTime(n.last_heartbeat)},
          // While its agent restarts (the time it gave itself), else null.
          {"awayUntil", n.away_until != absl::InfinitePast() ? json(FormatApiTime(n.away_until))
                                                             : json(nullptr)}};
}

}  // namespace moat::controller
