#include "node-agent/config/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"
#include "util/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace moat::agent {
namespace {

using Reader = YamlReader;

absl::Status ParseLimits(const Reader& r, const YAML::Node& node, const std::string& key,
                         Limits* limits) {
  RETURN_IF_ERROR(r.CheckMap(node, key, {"cpus", "memory", "pids", "workspace"}));
  if (node["cpus"]) {
    ASSIGN_OR_RETURN(limits->cpus, r.Number(node["cpus"], key + ".cpus", 0.01, 4096));
  }
  if (node["memory"]) {
    ASSIGN_OR_RETURN(limits->memory_bytes, r.Bytes(node["memory"], key + ".memory"));
  }
  if (node["pids"]) {
    ASSIGN_OR_RETURN(limits->pids, r.Int(node["pids"], key + ".pids", 1, 4194304));
  }
  if (node["workspace"]) {
    ASSIGN_OR_RETURN(limits->workspace_bytes, r.Bytes(node["workspace"], key + ".workspace"));
  }
  return absl::OkStatus();
}

bool IsProfileName(absl::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && c != '_') return false;
  }
  return true;
}

absl::StatusOr<ProfileConfig> ParseProfile(const Reader& r, const YAML::Node& node,
                                           const std::string& key) {
  RETURN_IF_ERROR(r.CheckMap(node, key, {"name", "root", "policy", "limits", "pool"}));
  ProfileConfig profile;
  ASSIGN_OR_RETURN(profile.name, r.String(node["name"], key + ".name"));
  if (!IsProfileName(profile.name)) {
    return r.Error(node["name"], key + ".name",
                   "must be 1 to 32 lower-case letters, digits, '-' or '_'");
  }
  if (node["root"]) {
    ASSIGN_OR_RETURN(profile.root_dir, r.AbsolutePath(node["root"], key + ".root"));
  }
  if (node["policy"]) {
    ASSIGN_OR_RETURN(profile.policy_file, r.AbsolutePath(node["policy"], key + ".policy"));
  }
  if (node["limits"])
    RETURN_IF_ERROR(ParseLimits(r, node["limits"], key + ".limits", &profile.limits));
  if (node["pool"]) {
    const YAML::Node pool = node["pool"];
    RETURN_IF_ERROR(r.CheckMap(pool, key + ".pool", {"floor", "ceiling"}));
    if (pool["floor"]) {
      ASSIGN_OR_RETURN(profile.pool_floor, r.Int(pool["floor"], key + ".pool.floor", 0, 10000));
    }
    if (pool["ceiling"]) {
      ASSIGN_OR_RETURN(profile.pool_ceiling,
                       r.Int(pool["ceiling"], key + ".pool.ceiling", 0, 10000));
    } else {
      profile.pool_ceiling = profile.pool_floor;
    }
    if (profile.pool_floor > profile.pool_ceiling) {
      return r.Error(pool, key + ".pool",
                     "has floor above ceiling; make floor at most ceiling (e.g. 5 and 50)");
    }
  }
  return profile;
}

absl::StatusOr<ControllerJoinConfig> ParseControllerJoin(const Reader& r, const YAML::Node& node) {
  RETURN_IF_ERROR(r.CheckMap(
      node, "controller",
      {"url", "join_token_file", "node_name", "advertise_url", "labels", "taints", "tls"}));
  ControllerJoinConfig c;
  ASSIGN_OR_RETURN(c.url, r.String(node["url"], "controller.url"));
  if (!absl::StartsWith(c.url, "http://") && !absl::StartsWith(c.url, "https://")) {
    return r.Error(node["url"], "controller.url", "must start with http:// or https://");
  }
  ASSIGN_OR_RETURN(c.join_token_file,
                   r.AbsolutePath(node["join_token_file"], "controller.join_token_file"));
  if (const YAML::Node tls = node["tls"]) {
    RETURN_IF_ERROR(r.CheckMap(tls, "controller.tls", {"ca"}));
    ASSIGN_OR_RETURN(c.ca_file, r.AbsolutePath(tls["ca"], "controller.tls.ca"));
    if (!absl::StartsWith(c.url, "https://")) {
      return r.Error(tls, "controller.tls.ca",
                     "is set but controller.url is not https://: serve the controller over TLS "
                     "and give its https:// URL, or drop controller.tls");
    }
  }
  if (node["node_name"]) {
    ASSIGN_OR_RETURN(c.node_name, r.String(node["node_name"], "controller.node_name"));
  }
  if (node["advertise_url"]) {
    ASSIGN_OR_RETURN(c.advertise_url, r.String(node["advertise_url"], "controller.advertise_url"));
  }
  for (auto [key, out] : {std::pair{"labels", &c.labels}, std::pair{"taints", &c.taints}}) {
    if (!node[key]) continue;
    const YAML::Node map = node[key];
    std::string full = absl::StrCat("controller.", key);
    if (!map.IsMap()) return r.Error(map, full, "must be a mapping of names to values");
    for (const auto& kv : map) {
      ASSIGN_OR_RETURN((*out)[kv.first.Scalar()],
                       r.String(kv.second, absl::StrCat(full, ".", kv.first.Scalar())));
    }
  }
  return c;
}

absl::StatusOr<AgentConfig> ParseRoot(const Reader& r, const YAML::Node& root) {
  RETURN_IF_ERROR(r.CheckMap(root, "",
                             {"listen", "tls", "token_file", "state_dir", "heartbeat", "recycle",
                              "restart_grace", "pool", "api", "profiles", "controller"}));
  AgentConfig config;
  if (const YAML::Node listen = root["listen"]) {
    RETURN_IF_ERROR(r.CheckMap(listen, "listen", {"address", "port"}));
    if (listen["address"]) {
      ASSIGN_OR_RETURN(config.listen_address, r.String(listen["address"], "listen.address"));
    }
    if (listen["port"]) {
      ASSIGN_OR_RETURN(config.port, r.Int(listen["port"], "listen.port", 0, 65535));
    }
  }
  if (const YAML::Node tls = root["tls"]) {
    RETURN_IF_ERROR(r.CheckMap(tls, "tls", {"cert", "key"}));
    TlsConfig t;
    ASSIGN_OR_RETURN(t.cert_file, r.AbsolutePath(tls["cert"], "tls.cert"));
    ASSIGN_OR_RETURN(t.key_file, r.AbsolutePath(tls["key"], "tls.key"));
    config.tls = t;
  }
  ASSIGN_OR_RETURN(config.token_file, r.AbsolutePath(root["token_file"], "token_file"));
  if (root["state_dir"]) {
    ASSIGN_OR_RETURN(config.state_dir, r.AbsolutePath(root["state_dir"], "state_dir"));
  }
  if (root["restart_grace"]) {
    ASSIGN_OR_RETURN(config.restart_grace, r.Duration(root["restart_grace"], "restart_grace",
                                                      absl::ZeroDuration(), absl::Hours(1)));
  }
  if (const YAML::Node hb = root["heartbeat"]) {
    RETURN_IF_ERROR(r.CheckMap(hb, "heartbeat", {"interval", "misses"}));
    if (hb["interval"]) {
      ASSIGN_OR_RETURN(config.heartbeat_interval,
                       r.Duration(hb["interval"], "heartbeat.interval", absl::Milliseconds(10),
                                  absl::Minutes(10)));
    }
    if (hb["misses"]) {
      ASSIGN_OR_RETURN(config.heartbeat_misses, r.Int(hb["misses"], "heartbeat.misses", 1, 100));
    }
  }
  if (const YAML::Node recycle = root["recycle"]) {
    RETURN_IF_ERROR(r.CheckMap(recycle, "recycle", {"per_second"}));
    if (recycle["per_second"]) {
      ASSIGN_OR_RETURN(config.recycle_per_second,
                       r.Number(recycle["per_second"], "recycle.per_second", 0.01, 10000));
    }
  }
  if (const YAML::Node pool = root["pool"]) {
    RETURN_IF_ERROR(r.CheckMap(pool, "pool", {"refill_concurrency"}));
    if (pool["refill_concurrency"]) {
      ASSIGN_OR_RETURN(config.pool_refill_concurrency,
                       r.Int(pool["refill_concurrency"], "pool.refill_concurrency", 1, 16));
    }
  }
  if (const YAML::Node api = root["api"]) {
    RETURN_IF_ERROR(r.CheckMap(api, "api", {"max_request_bytes", "default_ttl", "max_ttl"}));
    if (api["max_request_bytes"]) {
      ASSIGN_OR_RETURN(config.max_request_bytes,
                       r.Bytes(api["max_request_bytes"], "api.max_request_bytes"));
    }
    if (api["max_ttl"]) {
      ASSIGN_OR_RETURN(config.max_ttl, r.Duration(api["max_ttl"], "api.max_ttl", absl::Seconds(1),
                                                  absl::Hours(24 * 365)));
    }
    if (api["default_ttl"]) {
      ASSIGN_OR_RETURN(config.default_ttl, r.Duration(api["default_ttl"], "api.default_ttl",
                                                      absl::Seconds(1), config.max_ttl));
    }
  }
  if (config.default_ttl > config.max_ttl) {
    return r.Error(root["api"], "api.default_ttl", "is longer than api.max_ttl; shorten it");
  }
  if (root["controller"]) {
    ASSIGN_OR_RETURN(config.controller, ParseControllerJoin(r, root["controller"]));
  }
  const YAML::Node profiles = root["profiles"];
  if (!profiles.IsDefined() || !profiles.IsSequence() || profiles.size() == 0) {
    return r.Error(profiles, "profiles", "must be a list of at least one profile");
  }
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < profiles.size(); ++i) {
    std::string key = absl::StrCat("profiles[", i, "]");
    ASSIGN_OR_RETURN(ProfileConfig profile, ParseProfile(r, profiles[i], key));
    if (!names.insert(profile.name).second) {
      return r.Error(profiles[i], key + ".name",
                     absl::StrCat("repeats the profile name \"", profile.name, "\"; rename one"));
    }
    config.profiles.push_back(std::move(profile));
  }
  return config;
}

}  // namespace

const ProfileConfig* AgentConfig::FindProfile(absl::string_view name) const {
  for (const ProfileConfig& p : profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::StatusOr<std::string> ReadProfilePolicy(const ProfileConfig& profile) {
  if (profile.policy_text) return *profile.policy_text;
  if (profile.policy_file.empty()) return std::string();
  std::ifstream in(profile.policy_file);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read profile \"", profile.name, "\"'s policy file \"",
                     profile.policy_file, "\"; fix the agent config or the file's permissions"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status LoadProfilePolicies(AgentConfig* config) {
  for (ProfileConfig& profile : config->profiles) {
    ASSIGN_OR_RETURN(std::string text, ReadProfilePolicy(profile));
    absl::StatusOr<sandbox::Policy> policy = ParseAgentPolicy(text, profile.policy_file);
    if (!policy.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("profile \"", profile.name,
                                                     "\": ", policy.status().message(),
                                                     "; fix the file and start the agent again"));
    }
    profile.policy_text = std::move(text);
  }
  return absl::OkStatus();
}

absl::StatusOr<sandbox::Policy> ParseAgentPolicy(absl::string_view text, absl::string_view source) {
  sandbox::Policy policy;
  if (text.empty()) return policy;
  ASSIGN_OR_RETURN(
      sandbox::PolicyLayer layer,
      sandbox::ParsePolicyText(text, source, /*is_json=*/false, {.home = "", .cwd = "/"}));
  RETURN_IF_ERROR(sandbox::ApplyLayer(layer, sandbox::LayerTrust::kTrusted, &policy));
  if (!policy.allow_write.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": filesystem.allowWrite is not available to agent sandboxes: host "
                     "paths stay read-only; use /workspace (kept between commands) instead"));
  }
  return policy;
}

absl::StatusOr<AgentConfig> ParseConfig(absl::string_view yaml, absl::string_view source) {
  return ParseYamlDocument<AgentConfig>(yaml, source, ParseRoot);
}

absl::StatusOr<AgentConfig> LoadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read the config file \"", path,
                                            "\"; check --config and its permissions"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path);
}

std::vector<std::string> AgentOwnFiles(const AgentConfig& config, absl::string_view config_path) {
  std::vector<std::string> files;
  if (!config_path.empty()) {
    std::error_code error;
    const std::filesystem::path absolute =
        std::filesystem::absolute(std::filesystem::path(std::string(config_path)), error);
    files.push_back(error ? std::string(config_path) : absolute.lexically_normal().string());
  }
  files.push_back(config.token_file);
  if (config.tls) {
    files.push_back(config.tls->cert_file);
    files.push_back(config.tls->key_file);
  }
  if (config.controller) {
    files.push_back(config.controller->join_token_file);
    files.push_back(config.controller->ca_file);
  }
  for (const ProfileConfig& profile : config.profiles) files.push_back(profile.policy_file);
  std::erase_if(files, [](const std::string& f) { return f.empty(); });
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

}  // namespace moat::agent
