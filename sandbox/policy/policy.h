// The sandbox policy: what a run may reach (network, files) and what it may use (limits), and how
// it is assembled from layers:
//
//   built-in default < user file < --user-policy FILEs < project files < --policy FILE < flags
//   (~/.config/moat/policy.yaml)                    (./.moat/policy.yaml, ./.pi/sandbox.json)
//
// Trusted layers (user file, --policy, flags) replace allow lists and limits. A project layer
// comes from whatever repository the user cloned, so it may only tighten: lower limits, narrow
// allow lists, add denials, keep the home hidden. Deny lists are unions in every layer.
//
// Parsing of one file lives in policy_file.cc; merging and resolution in policy.cc.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sandbox/values/dns_server.h"
#include "sandbox/values/domain_pattern.h"
#include "sandbox/values/ip_address.h"
#include "util/paths.h"

namespace moat::sandbox {

struct Limits {
  uint64_t memory_bytes = 512ull << 20;
  uint64_t pids = 256;
  double cpus = 1.0;
  absl::Duration cpu_timeout = absl::Seconds(30);
  absl::Duration wall_timeout = absl::Seconds(60);
  uint64_t tmpfs_bytes = 64ull << 20;  // each of /tmp and /workspace
};

// How the egress proxy treats what allowedDomains lets through (see sandbox/egress/).
struct EgressLimits {
  uint64_t max_request_body_bytes = 16ull << 20;  // network.maxRequestBodyBytes
  uint64_t requests_per_minute = 600;             // network.requestsPerMinute
};

struct Policy {
  Limits limits;
  // Network values are parsed once, when a layer is merged, and travel as values from here to
  // the egress proxy (sandbox/values/). Each list holds no duplicates, in the order given.
  std::vector<DomainPattern> allowed_domains;
  std::vector<DomainPattern> denied_domains;
  // Ranges the proxy may dial although they are loopback, private or link-local. Default: none.
  std::vector<egress::Cidr> allowed_cidrs;
  // Upstream resolvers; empty: the host's /etc/resolv.conf.
  std::vector<egress::DnsServer> dns_servers;
  EgressLimits egress;
  bool transparent = false;  // network.transparent: allowed names resolve to proxied addresses
  std::vector<std::string> deny_read;  // absolute, lexically normalised host paths
  std::vector<std::string> allow_write;
  std::vector<std::string> deny_write;  // stay read-only even under allow_write
  // Glob patterns of denyRead/denyWrite (PathPattern texts). ResolvePolicy adds what they match
  // at start to deny_read/deny_write; new files matching a denyWrite pattern are refused by the
  // creation guard in writable host directories. `notes` says so, per pattern, for the result.
  std::vector<std::string> deny_read_patterns;
  std::vector<std::string> deny_write_patterns;
  std::vector<std::string> notes;
  bool hide_home = true;
  std::vector<std::pair<std::string, std::string>> env;  // in order; later layers override names
  std::vector<std::string> sources;                      // layers that contributed, in layer order
};

struct PathContext {
  std::string home;  // for "~"; may be empty, then "~" in a policy is an error
  std::string cwd;   // absolute; for relative paths and for finding project files
};

// One layer as written (the edge: a file, flags, an API request): only the keys that were present
// are set; network values are still texts, checked where they were read. Paths are absolute and
// normalised (ParsePolicyText resolves "~" and relative paths; the CLI uses ResolvePolicyPath).
struct PolicyLayer {
  std::string source;  // file path, or e.g. "command line"
  std::optional<uint64_t> memory_bytes, pids, tmpfs_bytes;
  std::optional<double> cpus;
  std::optional<absl::Duration> cpu_timeout, wall_timeout;
  std::optional<std::vector<std::string>> allowed_domains, denied_domains;
  std::optional<std::vector<std::string>> allowed_cidrs, dns_servers;
  std::optional<uint64_t> max_request_body_bytes, requests_per_minute;
  std::optional<bool> transparent;
  std::optional<std::vector<std::string>> deny_read, allow_write, deny_write;
  std::optional<std::vector<std::string>> deny_read_patterns, deny_write_patterns;
  std::optional<bool> hide_home;
  std::vector<std::pair<std::string, std::string>> env;
};

enum class LayerTrust { kTrusted, kProject };

// Parses one policy document (YAML, or JSON if `is_json`) into a layer. `source` names it in
// errors: `policy file "<source>": key "limits.memory": invalid size "12Q" (use e.g. 512M, 1G)`.
// Unknown keys, and sandbox-runtime keys moat does not implement that could widen the sandbox,
// are errors. Implemented in policy_file.cc.
absl::StatusOr<PolicyLayer> ParsePolicyText(absl::string_view text, absl::string_view source,
                                            bool is_json, const PathContext& paths);

// Reads and parses a file: ".json" files as JSON, anything else as YAML. The file must be a
// regular file of at most 1 MiB. Implemented in policy_file.cc.
absl::StatusOr<PolicyLayer> ParsePolicyFile(const std::string& path, const PathContext& paths);

// Validates `layer` and merges it into `policy` under the rules above. On error `policy` is left
// unchanged and the message names the layer, the key and, for a project layer that tries to
// widen, the value it tried and what the layers below allow.
absl::Status ApplyLayer(const PolicyLayer& layer, LayerTrust trust, Policy* policy);

struct PolicySources {
  PathContext paths;
  // --user-policy FILE...: trusted layers right above the user file and below the project files
  // (an agent's global configuration, e.g. Pi's ~/.pi/agent/extensions/sandbox.json).
  std::vector<std::string> user_files;
  std::optional<std::string> explicit_file;  // --policy FILE
  PolicyLayer flags;                         // built by the CLI from its flags
};

// Default < user file < user files < project files < explicit file < flags. Missing optional files
// (the user file, project files) are skipped; an unreadable or invalid one is an error, and so is
// a missing --user-policy or --policy file. Finally adds the mandatory write protections.
//
// With `origins`, also says which layer each value came from (moat policy show).
struct PolicyOrigins {
  // "limits.memory", "network.transparent", ... -> the layer that set the value in force.
  std::map<std::string, std::string> values;
  // "filesystem.allowWrite", ... -> each element -> the first layer that added it.
  std::map<std::string, std::map<std::string, std::string>> elements;
};
absl::StatusOr<Policy> ResolvePolicy(const PolicySources& sources,
                                     PolicyOrigins* origins = nullptr);

// ---- Building blocks, exposed for the CLI and for tests. ----

// The built-in default layer: the Limits defaults, no network, nothing writable, the home hidden,
// and the usual credential stores under `paths.home` denied for reading in case a later layer
// shows the home. Its source is "built-in default" (not added to Policy::sources).
Policy DefaultPolicy(const PathContext& paths);

// Where ResolvePolicy looks for files (project files in layer order).
std::string UserPolicyPath(const PathContext& paths);  // "" if paths.home is empty
std::vector<std::string> ProjectPolicyPaths(const PathContext& paths);

// Resolves a path as written in a policy: "~" and "~/..." against paths.home, relative paths
// against paths.cwd, then lexical normalisation ("a/./b/../c/" -> "a/c"; ".." stops at "/").
// Refuses empty paths, NUL and control bytes, "~user", and glob characters ("*", "?", "["): only
// denyRead and denyWrite take patterns (ResolvePathPattern), expanded before moat binds paths.
absl::StatusOr<std::string> ResolvePolicyPath(absl::string_view raw, const PathContext& paths);

// A glob in filesystem.denyRead/denyWrite (Pi's defaults have `*.pem`, `*.key`, `.env.*`).
// Without a "/" it names files at any depth below the project directory ("<cwd>/**/*.pem");
// with one, the directory part is a literal path ("~/certs/*.pem") and only its last component
// may hold `*`, `?` or `[...]` (fnmatch, a leading dot matched only by a dot).
struct PathPattern {
  std::string dir;   // absolute, normalised
  std::string glob;  // one path component
  bool recursive = false;
  std::string ToString() const;  // "<dir>/**/<glob>" or "<dir>/<glob>"
  static absl::StatusOr<PathPattern> FromString(absl::string_view text);
};
bool IsPathPattern(absl::string_view raw);
absl::StatusOr<PathPattern> ResolvePathPattern(absl::string_view raw, const PathContext& paths);
// Whether a file name matches one component glob.
bool GlobMatches(absl::string_view glob, absl::string_view name);

// NormalizeAbsolutePath and IsPathUnder: sandbox/util/paths.h (in namespace moat).
using ::moat::IsPathUnder;
using ::moat::NormalizeAbsolutePath;

// Paths that stay read-only under any allowed write root because writing them lets sandboxed code
// run outside the sandbox later or widen the next run (the list: protected_paths.h). Relative
// names are taken under each allow_write root and under the project directory (paths.cwd) when
// it is writable; home-relative ones apply when the home is inside a root. Returns those not
// already denied.
std::vector<std::string> MandatoryDenyWrite(const Policy& policy, const PathContext& paths);

// `policy file "<source>"` for file layers, the source as is otherwise ("command line").
std::string DescribeSource(absl::string_view source);

// Checks an environment variable for the sandbox: name [A-Za-z_][A-Za-z0-9_]*, value without NUL.
absl::Status ValidateEnvVar(absl::string_view name, absl::string_view value);

// Validation shared by files and flags: the message says what is wrong with `value`, not where;
// callers prefix the layer and key.
absl::Status ValidateMemory(uint64_t bytes);
absl::Status ValidatePids(uint64_t pids);
absl::Status ValidateCpus(double cpus);
absl::Status ValidateTimeout(absl::Duration timeout);
absl::Status ValidateTmpfsSize(uint64_t bytes);
absl::Status ValidateRequestBodyCap(uint64_t bytes);
absl::Status ValidateRequestsPerMinute(uint64_t n);
// Parse and normalise one network.allowedCidrs / network.dnsServers entry.
absl::StatusOr<std::string> NormaliseCidr(absl::string_view text);
absl::StatusOr<std::string> NormaliseDnsServer(absl::string_view text);

inline constexpr uint64_t kMaxPids = 4194304;  // the kernel's PID_MAX_LIMIT on 64-bit
inline constexpr absl::Duration kMinTimeout = absl::Milliseconds(1);

}  // namespace moat::sandbox
