#include "controller/config.h"

#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/status_macros.h"
#include "util/token.h"
#include "util/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace moat::controller {
namespace {

// Agent profile names, as node-agent/config.cc accepts them.
bool IsProfileName(absl::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && c != '_') return false;
  }
  return true;
}

absl::Status ParseListen(const YamlReader& r, const YAML::Node& listen, ControllerConfig* c) {
  RETURN_IF_ERROR(r.CheckMap(listen, "listen", {"address", "port"}));
  if (listen["address"]) {
    ASSIGN_OR_RETURN(c->listen_address, r.String(listen["address"], "listen.address"));
  }
  if (listen["port"]) {
    ASSIGN_OR_RETURN(c->port, r.Int(listen["port"], "listen.port", 0, 65535));
  }
  return absl::OkStatus();
}

absl::Status ParseImages(const YamlReader& r, const YAML::Node& images, ControllerConfig* c) {
  if (!images.IsSequence() || images.size() == 0) {
    return r.Error(images, "images",
                   "must be a list of {image, profile} rules, e.g. [{image: \"*\", profile: "
                   "default}]");
  }
  for (size_t i = 0; i < images.size(); ++i) {
    std::string key = absl::StrCat("images[", i, "]");
    RETURN_IF_ERROR(r.CheckMap(images[i], key, {"image", "profile"}));
    ImageRule rule;
    ASSIGN_OR_RETURN(rule.pattern, r.String(images[i]["image"], key + ".image"));
    size_t star = rule.pattern.find('*');
    if (star != std::string::npos && star != rule.pattern.size() - 1) {
      return r.Error(images[i]["image"], key + ".image",
                     "may hold one \"*\", only at its end (a prefix such as \"python:*\")");
    }
    ASSIGN_OR_RETURN(rule.profile, r.String(images[i]["profile"], key + ".profile"));
    if (!IsProfileName(rule.profile)) {
      return r.Error(images[i]["profile"], key + ".profile",
                     "must be an agent profile name: 1 to 32 lower-case letters, digits, '-' or "
                     "'_'");
    }
    c->images.push_back(std::move(rule));
  }
  return absl::OkStatus();
}

absl::Status ParseScheduling(const YamlReader& r, const YAML::Node& s, ControllerConfig* c) {
  RETURN_IF_ERROR(r.CheckMap(s, "scheduling", {"overcommit", "best_of_k", "retries"}));
  if (const YAML::Node o = s["overcommit"]) {
    RETURN_IF_ERROR(r.CheckMap(o, "scheduling.overcommit", {"cpu", "memory", "pids"}));
    if (o["cpu"]) {
      ASSIGN_OR_RETURN(c->overcommit.cpu, r.Number(o["cpu"], "scheduling.overcommit.cpu", 1, 100));
    }
    if (o["memory"]) {
      ASSIGN_OR_RETURN(c->overcommit.memory,
                       r.Number(o["memory"], "scheduling.overcommit.memory", 1, 100));
    }
    if (o["pids"]) {
      ASSIGN_OR_RETURN(c->overcommit.pids,
                       r.Number(o["pids"], "scheduling.overcommit.pids", 1, 100));
    }
  }
  if (s["best_of_k"]) {
    ASSIGN_OR_RETURN(c->best_of_k, r.Int(s["best_of_k"], "scheduling.best_of_k", 0, 100000));
  }
  if (s["retries"]) {
    ASSIGN_OR_RETURN(c->retries, r.Int(s["retries"], "scheduling.retries", 0, 10));
  }
  return absl::OkStatus();
}

absl::Status ParseNodes(const YamlReader& r, const YAML::Node& n, ControllerConfig* c) {
  RETURN_IF_ERROR(r.CheckMap(n, "nodes", {"heartbeat_interval", "misses", "lost_after", "tls"}));
  if (const YAML::Node tls = n["tls"]) {
    RETURN_IF_ERROR(r.CheckMap(tls, "nodes.tls", {"ca"}));
    ASSIGN_OR_RETURN(c->nodes_ca_file, r.AbsolutePath(tls["ca"], "nodes.tls.ca"));
  }
  if (n["heartbeat_interval"]) {
    ASSIGN_OR_RETURN(c->heartbeat_interval,
                     r.Duration(n["heartbeat_interval"], "nodes.heartbeat_interval",
                                absl::Milliseconds(10), absl::Minutes(10)));
  }
  if (n["misses"]) {
    ASSIGN_OR_RETURN(c->heartbeat_misses, r.Int(n["misses"], "nodes.misses", 1, 100));
  }
  if (n["lost_after"]) {
    ASSIGN_OR_RETURN(c->lost_after, r.Duration(n["lost_after"], "nodes.lost_after",
                                               absl::Milliseconds(10), absl::Hours(24)));
  }
  if (c->lost_after < c->heartbeat_interval * c->heartbeat_misses) {
    return r.Error(n, "nodes.lost_after",
                   "is shorter than heartbeat_interval x misses: a node would be lost before it is "
                   "NotReady; make it longer");
  }
  return absl::OkStatus();
}

absl::Status ParseApi(const YamlReader& r, const YAML::Node& api, ControllerConfig* c) {
  RETURN_IF_ERROR(r.CheckMap(api, "api",
                             {"max_request_bytes", "max_upload_bytes", "default_timeout",
                              "max_timeout", "create_timeout"}));
  if (api["max_upload_bytes"]) {
    ASSIGN_OR_RETURN(c->max_upload_bytes, r.Bytes(api["max_upload_bytes"], "api.max_upload_bytes"));
  }
  if (api["max_request_bytes"]) {
    ASSIGN_OR_RETURN(c->max_request_bytes,
                     r.Bytes(api["max_request_bytes"], "api.max_request_bytes"));
  }
  if (api["max_timeout"]) {
    ASSIGN_OR_RETURN(c->max_timeout, r.Duration(api["max_timeout"], "api.max_timeout",
                                                absl::Seconds(60), absl::Hours(24 * 365)));
  }
  if (api["default_timeout"]) {
    ASSIGN_OR_RETURN(c->default_timeout, r.Duration(api["default_timeout"], "api.default_timeout",
                                                    absl::Seconds(60), c->max_timeout));
  }
  if (api["create_timeout"]) {
    ASSIGN_OR_RETURN(c->create_timeout, r.Duration(api["create_timeout"], "api.create_timeout",
                                                   absl::Seconds(1), absl::Minutes(30)));
  }
  if (c->default_timeout > c->max_timeout) {
    return r.Error(api, "api.default_timeout", "is longer than api.max_timeout; shorten it");
  }
  return absl::OkStatus();
}

absl::Status ParsePrecheck(const YamlReader& r, const YAML::Node& n, ControllerConfig* c) {
  RETURN_IF_ERROR(r.CheckMap(n, "precheck",
                             {"enabled", "medium_policy", "approval_timeout", "max_pending",
                              "audit_max_age", "audit_max_records"}));
  if (n["enabled"]) {
    ASSIGN_OR_RETURN(std::string on, r.String(n["enabled"], "precheck.enabled"));
    if (on != "true" && on != "false") {
      return r.Error(n["enabled"], "precheck.enabled", "must be true or false");
    }
    c->precheck.enabled = on == "true";
  }
  if (n["medium_policy"]) {
    ASSIGN_OR_RETURN(c->precheck.medium_policy,
                     r.String(n["medium_policy"], "precheck.medium_policy"));
  }
  if (n["approval_timeout"]) {
    ASSIGN_OR_RETURN(c->precheck.approval_timeout,
                     r.Duration(n["approval_timeout"], "precheck.approval_timeout",
                                absl::Milliseconds(100), absl::Hours(1)));
  }
  if (n["max_pending"]) {
    ASSIGN_OR_RETURN(c->precheck.max_pending,
                     r.Int(n["max_pending"], "precheck.max_pending", 1, 1000));
  }
  if (n["audit_max_age"]) {
    ASSIGN_OR_RETURN(c->precheck.audit_max_age,
                     r.Duration(n["audit_max_age"], "precheck.audit_max_age", absl::Minutes(1),
                                absl::Hours(24 * 3660)));
  }
  if (n["audit_max_records"]) {
    ASSIGN_OR_RETURN(c->precheck.audit_max_records,
                     r.Int(n["audit_max_records"], "precheck.audit_max_records", 1, 10'000'000));
  }
  return absl::OkStatus();
}

// store: {kind: sqlite|memory|etcd, endpoints: [...], tls: {ca, cert, key}, prefix: moat/};
// "engine" is accepted for "kind".
absl::Status ParseStore(const YamlReader& r, const YAML::Node& store, ControllerConfig* c) {
  RETURN_IF_ERROR(r.CheckMap(store, "store", {"kind", "engine", "endpoints", "tls", "prefix"}));
  const char* name = store["engine"] ? "store.engine" : "store.kind";
  ASSIGN_OR_RETURN(std::string kind,
                   r.String(store["engine"] ? store["engine"] : store["kind"], name));
  if (kind == "sqlite") {
    c->store = StoreKind::kSqlite;
  } else if (kind == "memory") {
    c->store = StoreKind::kMemory;
  } else if (kind == "etcd") {
    c->store = StoreKind::kEtcd;
  } else {
    return r.Error(store["engine"] ? store["engine"] : store["kind"], name,
                   "must be \"sqlite\" (durable, in state_dir), \"etcd\" (several replicas: "
                   "add endpoints) or \"memory\" (tests: nothing survives a restart)");
  }
  if (c->store != StoreKind::kEtcd) {
    for (const char* key : {"endpoints", "tls", "prefix"}) {
      if (store[key]) {
        return r.Error(store[key], absl::StrCat("store.", key), "is for the etcd store only");
      }
    }
    return absl::OkStatus();
  }
  const YAML::Node endpoints = store["endpoints"];
  if (!endpoints || !endpoints.IsSequence() || endpoints.size() == 0) {
    return r.Error(endpoints, "store.endpoints",
                   "must list the etcd members' client URLs, e.g. [http://127.0.0.1:2379]");
  }
  for (size_t i = 0; i < endpoints.size(); ++i) {
    std::string key = absl::StrCat("store.endpoints[", i, "]");
    ASSIGN_OR_RETURN(std::string url, r.String(endpoints[i], key));
    if (!absl::StartsWith(url, "http://") && !absl::StartsWith(url, "https://")) {
      return r.Error(endpoints[i], key, "must be a URL: http://HOST:PORT or https://HOST:PORT");
    }
    c->etcd.endpoints.push_back(std::move(url));
  }
  if (const YAML::Node tls = store["tls"]) {
    RETURN_IF_ERROR(r.CheckMap(tls, "store.tls", {"ca", "cert", "key"}));
    if (tls["ca"]) {
      ASSIGN_OR_RETURN(c->etcd.ca_file, r.AbsolutePath(tls["ca"], "store.tls.ca"));
    }
    if (tls["cert"]) {
      ASSIGN_OR_RETURN(c->etcd.cert_file, r.AbsolutePath(tls["cert"], "store.tls.cert"));
    }
    if (tls["key"]) {
      ASSIGN_OR_RETURN(c->etcd.key_file, r.AbsolutePath(tls["key"], "store.tls.key"));
    }
    if (c->etcd.cert_file.empty() != c->etcd.key_file.empty()) {
      return r.Error(tls, "store.tls",
                     "needs both cert and key (a client certificate), or neither");
    }
  }
  if (store["prefix"]) {
    ASSIGN_OR_RETURN(c->etcd.prefix, r.String(store["prefix"], "store.prefix"));
    if (c->etcd.prefix.empty() || c->etcd.prefix.back() != '/') {
      return r.Error(store["prefix"], "store.prefix", "must end in \"/\" (e.g. moat/)");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseLanguages(const YamlReader& r, const YAML::Node& n, ControllerConfig* c) {
  if (!n.IsMap()) return r.Error(n, "languages", "must be a map of language: {wall, cpu}");
  for (const auto& it : n) {
    LanguageProfileConfig l;
    l.name = it.first.as<std::string>();
    const std::string key = absl::StrCat("languages.", l.name);
    RETURN_IF_ERROR(r.CheckMap(it.second, key, {"wall", "cpu"}));
    if (it.second["wall"]) {
      ASSIGN_OR_RETURN(
          l.wall, r.Duration(it.second["wall"], key + ".wall", absl::Seconds(1), absl::Hours(24)));
    }
    if (it.second["cpu"]) {
      ASSIGN_OR_RETURN(l.cpu, r.Duration(it.second["cpu"], key + ".cpu", absl::Milliseconds(100),
                                         absl::Hours(24)));
    }
    c->languages.push_back(std::move(l));
  }
  return absl::OkStatus();
}

// leader_election: {advertise_url, lease_ttl, renew_deadline, renew_interval} (etcd store).
absl::Status ParseLeaderElection(const YamlReader& r, const YAML::Node& n, ControllerConfig* c) {
  RETURN_IF_ERROR(r.CheckMap(n, "leader_election",
                             {"advertise_url", "lease_ttl", "renew_deadline", "renew_interval"}));
  LeaderElectionConfig& l = c->leader_election;
  if (n["advertise_url"]) {
    ASSIGN_OR_RETURN(l.advertise_url,
                     r.String(n["advertise_url"], "leader_election.advertise_url"));
    if (!absl::StartsWith(l.advertise_url, "http://") &&
        !absl::StartsWith(l.advertise_url, "https://")) {
      return r.Error(n["advertise_url"], "leader_election.advertise_url",
                     "must be the URL other replicas reach this one at: http(s)://HOST:PORT");
    }
  }
  if (n["lease_ttl"]) {
    ASSIGN_OR_RETURN(l.lease_ttl, r.Duration(n["lease_ttl"], "leader_election.lease_ttl",
                                             absl::Seconds(2), absl::Minutes(5)));
  }
  if (n["renew_deadline"]) {
    ASSIGN_OR_RETURN(l.renew_deadline,
                     r.Duration(n["renew_deadline"], "leader_election.renew_deadline",
                                absl::Seconds(1), absl::Minutes(5)));
  }
  if (n["renew_interval"]) {
    ASSIGN_OR_RETURN(l.renew_interval,
                     r.Duration(n["renew_interval"], "leader_election.renew_interval",
                                absl::Milliseconds(100), absl::Minutes(1)));
  }
  if (!(l.renew_interval < l.renew_deadline && l.renew_deadline < l.lease_ttl)) {
    return r.Error(n, "leader_election",
                   "needs renew_interval < renew_deadline < lease_ttl (defaults 2s, 10s, 15s): "
                   "a leader must step down before etcd can give its lease away");
  }
  return absl::OkStatus();
}

absl::StatusOr<ControllerConfig> ParseRoot(const YamlReader& r, const YAML::Node& root) {
  ControllerConfig c;
  if (root.IsNull()) {  // An empty file: every default.
    c.images.push_back({"*", "default"});
    return c;
  }
  RETURN_IF_ERROR(
      r.CheckMap(root, "",
                 {"listen", "tls", "state_dir", "store", "api_keys_file", "join_token_file",
                  "images", "nodes", "scheduling", "api", "admin_key_file", "precheck", "languages",
                  "max_declared_duration", "leader_election"}));
  if (root["listen"]) RETURN_IF_ERROR(ParseListen(r, root["listen"], &c));
  if (const YAML::Node tls = root["tls"]) {
    RETURN_IF_ERROR(r.CheckMap(tls, "tls", {"cert", "key"}));
    ASSIGN_OR_RETURN(c.tls_cert_file, r.AbsolutePath(tls["cert"], "tls.cert"));
    ASSIGN_OR_RETURN(c.tls_key_file, r.AbsolutePath(tls["key"], "tls.key"));
  }
  if (root["state_dir"]) {
    ASSIGN_OR_RETURN(c.state_dir, r.AbsolutePath(root["state_dir"], "state_dir"));
  }
  if (root["store"]) RETURN_IF_ERROR(ParseStore(r, root["store"], &c));
  if (root["leader_election"]) {
    RETURN_IF_ERROR(ParseLeaderElection(r, root["leader_election"], &c));
  }
  if (root["api_keys_file"]) {
    ASSIGN_OR_RETURN(c.api_keys_file, r.AbsolutePath(root["api_keys_file"], "api_keys_file"));
  }
  if (root["join_token_file"]) {
    ASSIGN_OR_RETURN(c.join_token_file, r.AbsolutePath(root["join_token_file"], "join_token_file"));
  }
  if (root["images"]) RETURN_IF_ERROR(ParseImages(r, root["images"], &c));
  if (root["nodes"]) RETURN_IF_ERROR(ParseNodes(r, root["nodes"], &c));
  if (root["scheduling"]) RETURN_IF_ERROR(ParseScheduling(r, root["scheduling"], &c));
  if (root["api"]) RETURN_IF_ERROR(ParseApi(r, root["api"], &c));
  if (root["admin_key_file"]) {
    ASSIGN_OR_RETURN(c.admin_key_file, r.AbsolutePath(root["admin_key_file"], "admin_key_file"));
  }
  if (root["precheck"]) RETURN_IF_ERROR(ParsePrecheck(r, root["precheck"], &c));
  if (root["languages"]) RETURN_IF_ERROR(ParseLanguages(r, root["languages"], &c));
  if (root["max_declared_duration"]) {
    ASSIGN_OR_RETURN(c.max_declared_duration,
                     r.Duration(root["max_declared_duration"], "max_declared_duration",
                                absl::Seconds(1), absl::Minutes(5)));
  }
  if (c.images.empty()) c.images.push_back({"*", "default"});
  return c;
}

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " \"", path, "\"; check the path and its permissions"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string ControllerConfig::ProfileForImage(absl::string_view image) const {
  for (const ImageRule& rule : images) {
    if (absl::EndsWith(rule.pattern, "*")) {
      if (absl::StartsWith(image,
                           absl::string_view(rule.pattern).substr(0, rule.pattern.size() - 1)))
        return rule.profile;
    } else if (image == rule.pattern) {
      return rule.profile;
    }
  }
  return "";
}

absl::StatusOr<ControllerConfig> ParseConfig(absl::string_view yaml, absl::string_view source) {
  return ParseYamlDocument<ControllerConfig>(yaml, source, ParseRoot);
}

absl::StatusOr<ControllerConfig> LoadConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, "the config file"));
  return ParseConfig(text, path);
}

absl::StatusOr<std::vector<ApiKey>> ParseApiKeys(absl::string_view text, absl::string_view source) {
  std::vector<ApiKey> keys;
  absl::flat_hash_set<std::string> seen;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    ApiKey key;
    if (fields.size() == 1) {
      key = {"default", std::string(fields[0])};
    } else if (fields.size() == 2) {
      key = {std::string(fields[0]), std::string(fields[1])};
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ":", line_number, ": write \"TENANT KEY\" or \"KEY\", nothing more"));
    }
    if (key.key.size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_number,
                       ": the key is shorter than 16 bytes; use a long random one (openssl rand "
                       "-hex 32)"));
    }
    if (!seen.insert(key.key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_number, ": repeats a key; give each tenant its own"));
    }
    keys.push_back(std::move(key));
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     " holds no key; add a line \"TENANT KEY\" or leave api_keys_file "
                     "out of the config"));
  }
  return keys;
}

absl::StatusOr<std::vector<ApiKey>> LoadApiKeys(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadSecretFile(path));
  return ParseApiKeys(text, path);
}

}  // namespace moat::controller
