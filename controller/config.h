// moat-controller's configuration file (YAML), parsed and validated once at start into plain
// structs. Unknown keys and bad values are errors that name the file, the key and what to do.
// docs/controller.md describes every key; the defaults serve one machine:
//
//   listen: {address: 127.0.0.1, port: 8080}
//   tls: {cert: /etc/moat/controller.crt, key: /etc/moat/controller.key}  # optional
//   state_dir: /var/lib/moat-controller
//   store: {kind: sqlite}                      # sqlite (in state_dir) or memory (tests only)
//   store: {kind: etcd, endpoints: [http://10.0.0.1:2379, ...],       # several replicas
//           tls: {ca: FILE, cert: FILE, key: FILE}, prefix: moat/}
//   leader_election: {advertise_url: http://10.0.0.5:8080, lease_ttl: 15s,
//                     renew_deadline: 10s, renew_interval: 2s}        # etcd store only
//   api_keys_file: /etc/moat/controller.keys   # lines "TENANT KEY"; optional: no file, no auth
//   join_token_file: /etc/moat/join.token      # agents prove they know it to join
//   images:                                    # image.uri -> agent profile, first match wins
//     - {image: "python:*", profile: python}
//     - {image: "*", profile: default}
//   nodes: {heartbeat_interval: 5s, misses: 3, lost_after: 30s,
//           tls: {ca: /etc/moat/agents-ca.crt}}   # verifies agents' https:// URLs
//   scheduling: {overcommit: {cpu: 4, memory: 1, pids: 1}, best_of_k: 20, retries: 3}
//   api: {max_request_bytes: 1MiB, max_upload_bytes: 64MiB, default_timeout: 10m,
//         max_timeout: 24h, create_timeout: 60s}
//   admin_key_file: /etc/moat/admin.key       # optional: the admin API (tenants, approvals)
//   precheck: {enabled: true, medium_policy: strict, approval_timeout: 5m, max_pending: 8}
//   languages:                                 # base limits per language profile
//     python: {wall: 60s, cpu: 15s}            # cpu/wall is the profile's ratio cap
//   max_declared_duration: 5m
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "controller/scheduler/framework.h"
#include "controller/tenants/run_limits.h"

namespace moat::controller {

inline constexpr char kDefaultConfigPath[] = "/etc/moat/controller.yaml";

struct ImageRule {
  std::string pattern;  // An image URI, or a prefix ending in "*"; "*" alone matches any.
  std::string profile;  // The agent profile sandboxes of matching images run in.
};

enum class StoreKind { kSqlite, kMemory, kEtcd };

struct EtcdConfig {
  std::vector<std::string> endpoints;
  std::string ca_file, cert_file, key_file;  // TLS to the members; optional.
  std::string prefix = "moat/";              // Every key of this fleet lives under it.
};

struct LeaderElectionConfig {
  std::string advertise_url;  // Where followers forward writes to this replica; default
                              // http://<listen address>:<port>.
  absl::Duration lease_ttl = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration renew_interval = absl::Seconds(2);
};

// The pre-check (controller/precheck/precheck.h) of commands sent through the controller.
struct PrecheckConfig {
  bool enabled = true;
  std::string medium_policy = "strict";                // The policy medium-risk code runs under.
  absl::Duration approval_timeout = absl::Minutes(5);  // Undecided high risk is then rejected.
  int max_pending = 8;  // Commands one tenant may have waiting for approval at once.
  // The audit trail keeps at most this many records (the newest), none older than this.
  absl::Duration audit_max_age = absl::Hours(24 * 30);
  int64_t audit_max_records = 10000;
};

struct ControllerConfig {
  std::string listen_address = "127.0.0.1";
  int port = 8080;                          // 0: any free port (tests).
  std::string tls_cert_file, tls_key_file;  // Both or neither.
  std::string state_dir = "/var/lib/moat-controller";
  StoreKind store = StoreKind::kSqlite;
  EtcdConfig etcd;  // store: etcd only.
  LeaderElectionConfig leader_election;
  std::string api_keys_file;  // Empty: the API takes no key (loopback development only).
  std::string join_token_file = "/etc/moat/join.token";
  std::vector<ImageRule> images;
  absl::Duration heartbeat_interval = absl::Seconds(5);
  int heartbeat_misses = 3;                       // Missed in a row: the node is NotReady.
  absl::Duration lost_after = absl::Seconds(30);  // Since the last heartbeat: the node is lost.
  std::string nodes_ca_file;  // Verifies agents' https:// URLs; empty: the system's CAs.
  scheduler::Overcommit overcommit;
  int best_of_k = 20;  // Nodes sampled per decision in large fleets; 0: every node.
  int retries = 3;     // Other nodes tried after an agent fails a create.
  uint64_t max_request_bytes = 1 << 20;
  uint64_t max_upload_bytes = 64 << 20;  // Bodies proxied to a sandbox (file uploads).
  absl::Duration default_timeout = absl::Minutes(10);
  absl::Duration max_timeout = absl::Hours(24);
  absl::Duration create_timeout = absl::Seconds(60);  // A create waits this long for a node.
  std::string admin_key_file;  // Empty: no admin API (tenants live in api_keys_file only).
  PrecheckConfig precheck;
  std::vector<LanguageProfileConfig> languages;  // Empty: python, javascript, shell defaults.
  absl::Duration max_declared_duration = absl::Minutes(5);

  // The profile for an image URI: the first rule that matches; empty if none does.
  std::string ProfileForImage(absl::string_view image) const;
};

// `source` names the file in error messages.
absl::StatusOr<ControllerConfig> ParseConfig(absl::string_view yaml, absl::string_view source);
absl::StatusOr<ControllerConfig> LoadConfig(const std::string& path);

// An API key and the tenant it belongs to.
struct ApiKey {
  std::string tenant;
  std::string key;
};

// Lines "TENANT KEY" (or "KEY": tenant "default"); blank lines and "#" comments skipped. Refuses
// files others can read, keys shorter than 16 bytes, and repeated keys.
absl::StatusOr<std::vector<ApiKey>> ParseApiKeys(absl::string_view text, absl::string_view source);
absl::StatusOr<std::vector<ApiKey>> LoadApiKeys(const std::string& path);

}  // namespace moat::controller
