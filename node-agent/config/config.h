// The agent's configuration file (YAML), parsed and validated once at start into plain structs.
// Unknown keys and bad values are errors that name the file, the key and what to do.
//
//   listen: {address: 127.0.0.1, port: 7070}
//   tls: {cert: /etc/moat/agent.crt, key: /etc/moat/agent.key}   # optional
//   token_file: /etc/moat/agent.token                              # required
//   state_dir: /var/lib/moat-agent
//   heartbeat: {interval: 5s, misses: 3}
//   recycle: {per_second: 10}
//   restart_grace: 60s    # sandboxes outlive a stopped or killed agent this long (0s: never)
//   pool: {refill_concurrency: 1}         # warm sandboxes made at once, all profiles together
//   api: {max_request_bytes: 1MiB, default_ttl: 30m, max_ttl: 24h}
//   profiles:
//     - name: python
//       root: /srv/moat/roots/python        # default "/": the host root, read-only
//       policy: /etc/moat/policies/python.yaml
//       limits: {cpus: 1, memory: 512MiB, pids: 256, workspace: 1GiB}
//       pool: {floor: 5, ceiling: 50}
//   controller:                                   # optional: join a moat-controller
//     {url: http://127.0.0.1:8080, join_token_file: /etc/moat/join.token, node_name: n1,
//      advertise_url: http://10.0.0.5:7070, labels: {zone: a}, taints: {dedicated: ci},
//      tls: {ca: /etc/moat/controller-ca.crt}}     # verifies an https:// url; default: system CAs
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node-agent/config/limits.h"
#include "sandbox/policy/policy.h"

namespace moat::agent {

struct ProfileConfig {
  std::string name;            // [a-z0-9_-]{1,32}; unique.
  std::string root_dir = "/";  // Absolute; becomes the sandbox's read-only "/".
  std::string policy_file;     // Absolute path of the default policy; empty: runtime default.
  // The policy file's text, read and checked by LoadProfilePolicies when the agent starts.
  std::optional<std::string> policy_text;
  Limits limits;
  int pool_floor = 0;    // Warm sandboxes kept at least...
  int pool_ceiling = 0;  // ...and at most; floor <= ceiling.
};

struct TlsConfig {
  std::string cert_file;
  std::string key_file;
};

// The controller this node joins (controller_link.h); absent: the agent serves alone.
struct ControllerJoinConfig {
  std::string url;              // http(s)://host:port of moat-controller.
  std::string join_token_file;  // The fleet's join token (mode 0600).
  // The CA that signed the controller's certificate (an https:// url); empty: the system's.
  std::string ca_file;
  std::string node_name;      // Default: the host name.
  std::string advertise_url;  // How the controller reaches this agent; default from listen.
  std::map<std::string, std::string> labels, taints;
};

struct AgentConfig {
  std::string listen_address = "127.0.0.1";
  int port = 7070;  // 0: any free port (tests).
  std::optional<TlsConfig> tls;
  std::string token_file;
  std::string state_dir = "/var/lib/moat-agent";
  absl::Duration heartbeat_interval = absl::Seconds(5);
  int heartbeat_misses = 3;
  double recycle_per_second = 10;
  // How long a sandbox waits for a restarted agent to re-adopt it (docs/agent.md); zero: an
  // agent's stop or death ends its sandboxes.
  absl::Duration restart_grace = absl::Seconds(60);
  // How many warm-pool sandboxes are made at the same time (docs/pool.md): 1 or 2 keep the
  // refill from starving the sandboxes that run.
  int pool_refill_concurrency = 1;
  uint64_t max_request_bytes = 1 << 20;
  absl::Duration default_ttl = absl::Minutes(30);
  absl::Duration max_ttl = absl::Hours(24);
  std::vector<ProfileConfig> profiles;  // At least one.
  std::optional<ControllerJoinConfig> controller;

  const ProfileConfig* FindProfile(absl::string_view name) const;
};

// `source` names the file in error messages.
absl::StatusOr<AgentConfig> ParseConfig(absl::string_view yaml, absl::string_view source);
absl::StatusOr<AgentConfig> LoadConfig(const std::string& path);

// Reads every profile's policy file and parses it as a sandbox's policy (ParseAgentPolicy), so a
// broken profile stops the agent at start instead of failing each of its creates. Keeps the text
// in policy_text; an edited file takes effect at the next start.
absl::Status LoadProfilePolicies(AgentConfig* config);

// The profile's default policy document: policy_text once loaded, else the policy file's text;
// empty if it has none. FailedPrecondition if the file cannot be read.
absl::StatusOr<std::string> ReadProfilePolicy(const ProfileConfig& profile);

// A policy document (a profile's, or a create request's) as an agent sandbox's policy: parsed as
// a trusted layer over the runtime's defaults, and refused if it asks for what agent sandboxes
// cannot have (allowWrite: host paths stay read-only). `source` names it in errors.
absl::StatusOr<sandbox::Policy> ParseAgentPolicy(absl::string_view text, absl::string_view source);

// The agent's own files on the host, which no sandbox may read even where its root shows them
// (the host root of a profile without `root`, an agent pod's mounts): the config file at
// `config_path` (made absolute against the working directory), the node and join tokens, the TLS
// certificate and key, the controller's CA and the profiles' policies. Each sandbox sees them
// covered (KernelBackendOptions::private_paths); a directory is not hidden, only these files.
std::vector<std::string> AgentOwnFiles(const AgentConfig& config, absl::string_view config_path);

}  // namespace moat::agent
