#include "sandbox/policy/policy.h"

#include <dirent.h>
#include <fnmatch.h>

#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sandbox/policy/protected_paths.h"
#include "sandbox/values/dns_server.h"
#include "sandbox/values/domain_pattern.h"
#include "sandbox/values/ip_address.h"
#include "sandbox/values/texts.h"
#include "util/env.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace moat::sandbox {
namespace {

constexpr size_t kMaxPathLength = 4095;  // PATH_MAX minus the terminating NUL

// Credential stores under the home, denied for reading by default. They only matter when a
// trusted layer sets hideHome: false; deny lists are unions, so no layer can remove them.
constexpr absl::string_view kDefaultDenyReadUnderHome[] = {
    ".ssh",   ".gnupg",           ".aws",   ".azure",  ".config/gcloud", ".kube", ".docker",
    ".netrc", ".git-credentials", ".npmrc", ".pypirc", ".config/gh",
};

absl::Status KeyError(const PolicyLayer& layer, absl::string_view key, absl::string_view message,
                      absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  return absl::Status(code, absl::StrCat(DescribeSource(layer.source), ": key ",
                                         QuoteForMessage(key), ": ", message));
}

absl::Status WideningError(const PolicyLayer& layer, absl::string_view key,
                           absl::string_view message) {
  return KeyError(layer, key, message, absl::StatusCode::kPermissionDenied);
}

template <typename T>
void AppendUnique(std::vector<T>* list, T value) {
  if (std::find(list->begin(), list->end(), value) == list->end())
    list->push_back(std::move(value));
}

// Parses one list of a layer's network values (domain patterns, CIDRs, DNS servers) into
// values, without duplicates; an entry that does not parse is the layer's error under `key`.
template <typename T, typename Parse>
absl::StatusOr<std::vector<T>> ParseValues(const PolicyLayer& layer, absl::string_view key,
                                           const std::vector<std::string>& raw, Parse parse) {
  std::vector<T> out;
  for (const std::string& text : raw) {
    absl::StatusOr<T> value = parse(text);
    if (!value.ok()) return KeyError(layer, key, value.status().message());
    AppendUnique(&out, *std::move(value));
  }
  return out;
}

absl::StatusOr<std::vector<DomainPattern>> NormaliseDomains(const PolicyLayer& layer,
                                                            absl::string_view key,
                                                            const std::vector<std::string>& raw,
                                                            DomainPattern::ListKind kind) {
  return ParseValues<DomainPattern>(
      layer, key, raw, [kind](absl::string_view text) { return DomainPattern::Parse(text, kind); });
}

const std::vector<std::string>& Texts(const std::vector<std::string>& texts) { return texts; }
template <typename T>
std::vector<std::string> Texts(const std::vector<T>& values) {
  return ValueTexts(values);
}

// Layers carry resolved paths; this re-checks them, since flags are built outside this module.
absl::StatusOr<std::vector<std::string>> NormalisePaths(const PolicyLayer& layer,
                                                        absl::string_view key,
                                                        const std::vector<std::string>& raw) {
  std::vector<std::string> out;
  for (const std::string& path : raw) {
    if (!absl::StartsWith(path, "/")) {
      return KeyError(layer, key,
                      absl::StrCat("path ", QuoteForMessage(path),
                                   " is not absolute; resolve it with ResolvePolicyPath first"));
    }
    absl::StatusOr<std::string> resolved = ResolvePolicyPath(path, PathContext{});
    if (!resolved.ok()) return KeyError(layer, key, resolved.status().message());
    AppendUnique(&out, *std::move(resolved));
  }
  return out;
}

template <typename T>
std::string DescribeList(const std::vector<T>& values) {
  constexpr size_t kMaxShown = 8;
  const std::vector<std::string>& list = Texts(values);
  std::vector<std::string> shown;
  for (size_t i = 0; i < list.size() && i < kMaxShown; ++i) shown.push_back(list[i]);
  std::string out = absl::StrJoin(shown, ", ");
  if (list.size() > kMaxShown) absl::StrAppend(&out, ", ... (", list.size(), " in all)");
  return out;
}

// For a project layer: a new limit may be equal or lower, never higher.
template <typename T, typename Format>
absl::Status CheckNotRaised(const PolicyLayer& layer, absl::string_view key, const T& value,
                            const T& current, Format format) {
  if (value <= current) return absl::OkStatus();
  return WideningError(
      layer, key,
      absl::StrCat(format(value), " is above ", format(current),
                   " set by the layers below; a project policy may only lower limits"));
}

std::string FormatCount(uint64_t n) { return absl::StrCat(n); }
std::string FormatCpus(double cpus) { return absl::StrCat(cpus); }

// A limit `layer` may set (`value`, under `key`): it must pass `validate`, and for a project
// layer not be above `*limit`, the value of the layers below; then it is in force.
template <typename T, typename Validate, typename Format>
absl::Status MergeLimit(const PolicyLayer& layer, bool project, absl::string_view key,
                        const std::optional<T>& value, Validate validate, T* limit, Format format) {
  if (!value) return absl::OkStatus();
  if (absl::Status valid = validate(*value); !valid.ok()) {
    return KeyError(layer, key, valid.message());
  }
  if (project) RETURN_IF_ERROR(CheckNotRaised(layer, key, *value, *limit, format));
  *limit = *value;
  return absl::OkStatus();
}

// Merges the limits of `layer` into `limits`.
absl::Status MergeLimits(const PolicyLayer& layer, LayerTrust trust, Limits* limits) {
  const bool project = trust == LayerTrust::kProject;
  auto merge = [&](absl::string_view key, const auto& value, auto validate, auto* limit,
                   auto format) {
    return MergeLimit(layer, project, key, value, validate, limit, format);
  };
  RETURN_IF_ERROR(merge("limits.memory", layer.memory_bytes, ValidateMemory, &limits->memory_bytes,
                        FormatSize));
  RETURN_IF_ERROR(merge("limits.pids", layer.pids, ValidatePids, &limits->pids, FormatCount));
  RETURN_IF_ERROR(merge("limits.cpus", layer.cpus, ValidateCpus, &limits->cpus, FormatCpus));
  RETURN_IF_ERROR(merge("limits.cpuTimeout", layer.cpu_timeout, ValidateTimeout,
                        &limits->cpu_timeout, absl::FormatDuration));
  RETURN_IF_ERROR(merge("limits.wallTimeout", layer.wall_timeout, ValidateTimeout,
                        &limits->wall_timeout, absl::FormatDuration));
  RETURN_IF_ERROR(merge("limits.tmpfsSize", layer.tmpfs_bytes, ValidateTmpfsSize,
                        &limits->tmpfs_bytes, FormatSize));
  return absl::OkStatus();
}

constexpr absl::string_view kTrustHint =
    "a project policy may only narrow what the layers below allow; if you trust it, add it to "
    "~/.config/moat/policy.yaml or pass it with --policy or a flag";

absl::Status MergeAllowedDomains(const PolicyLayer& layer, LayerTrust trust, Policy* policy) {
  if (!layer.allowed_domains) return absl::OkStatus();
  constexpr absl::string_view kKey = "network.allowedDomains";
  ASSIGN_OR_RETURN(
      std::vector<DomainPattern> domains,
      NormaliseDomains(layer, kKey, *layer.allowed_domains, DomainPattern::ListKind::kAllow));
  if (trust == LayerTrust::kProject) {
    const std::vector<DomainPattern>& current = policy->allowed_domains;
    for (const DomainPattern& wanted : domains) {
      bool covered = std::any_of(current.begin(), current.end(),
                                 [&](const DomainPattern& p) { return p.Covers(wanted); });
      if (covered) continue;
      const std::string text = wanted.ToString();
      if (policy->allowed_domains.empty()) {
        return WideningError(layer, kKey,
                             absl::StrCat(QuoteForMessage(text),
                                          " is not allowed: the layers below allow no network "
                                          "access; ",
                                          kTrustHint));
      }
      return WideningError(layer, kKey,
                           absl::StrCat(QuoteForMessage(text),
                                        " is not covered by the domains the layers below allow (",
                                        DescribeList(policy->allowed_domains), "); ", kTrustHint));
    }
  }
  policy->allowed_domains = std::move(domains);
  return absl::OkStatus();
}

// network.allowedCidrs, dnsServers, maxRequestBodyBytes, requestsPerMinute and transparent. A
// project layer may narrow the lists (every range inside one allowed below; resolvers only from
// a list set below), lower the limits and turn transparent mode off, nothing else.
absl::Status MergeEgress(const PolicyLayer& layer, LayerTrust trust, Policy* policy) {
  const bool project = trust == LayerTrust::kProject;
  if (layer.allowed_cidrs) {
    constexpr absl::string_view kKey = "network.allowedCidrs";
    ASSIGN_OR_RETURN(
        std::vector<egress::Cidr> cidrs,
        ParseValues<egress::Cidr>(layer, kKey, *layer.allowed_cidrs, [](absl::string_view text) {
          return egress::Cidr::Parse(text);
        }));
    if (project) {
      for (const egress::Cidr& wanted : cidrs) {
        bool covered = std::any_of(policy->allowed_cidrs.begin(), policy->allowed_cidrs.end(),
                                   [&](const egress::Cidr& have) {
                                     return have.prefix_length() <= wanted.prefix_length() &&
                                            have.Contains(wanted.base());
                                   });
        if (covered) continue;
        return WideningError(
            layer, kKey,
            absl::StrCat(
                QuoteForMessage(wanted.ToString()),
                " is not inside a range the layers below allow (",
                policy->allowed_cidrs.empty() ? "none" : DescribeList(policy->allowed_cidrs), "); ",
                kTrustHint));
      }
    }
    policy->allowed_cidrs = std::move(cidrs);
  }
  if (layer.dns_servers) {
    constexpr absl::string_view kKey = "network.dnsServers";
    ASSIGN_OR_RETURN(
        std::vector<egress::DnsServer> servers,
        ParseValues<egress::DnsServer>(layer, kKey, *layer.dns_servers, egress::ParseDnsServer));
    if (servers.empty()) {
      return KeyError(layer, kKey,
                      "is empty; remove the key to use the host's /etc/resolv.conf, or list at "
                      "least one server");
    }
    if (project) {
      for (const egress::DnsServer& server : servers) {
        if (std::find(policy->dns_servers.begin(), policy->dns_servers.end(), server) !=
            policy->dns_servers.end()) {
          continue;
        }
        return WideningError(
            layer, kKey,
            absl::StrCat(QuoteForMessage(server.ToString()),
                         policy->dns_servers.empty()
                             ? " would replace the host's resolvers, which the layers below use"
                             : absl::StrCat(" is not one of the resolvers the layers below use (",
                                            DescribeList(policy->dns_servers), ")"),
                         "; ", kTrustHint));
      }
    }
    policy->dns_servers = std::move(servers);
  }
  RETURN_IF_ERROR(MergeLimit(layer, project, "network.maxRequestBodyBytes",
                             layer.max_request_body_bytes, ValidateRequestBodyCap,
                             &policy->egress.max_request_body_bytes, FormatSize));
  RETURN_IF_ERROR(MergeLimit(layer, project, "network.requestsPerMinute", layer.requests_per_minute,
                             ValidateRequestsPerMinute, &policy->egress.requests_per_minute,
                             FormatCount));
  if (layer.transparent) {
    if (project && *layer.transparent && !policy->transparent) {
      return WideningError(
          layer, "network.transparent",
          absl::StrCat("a project policy may turn transparent mode off, not on; ", kTrustHint));
    }
    policy->transparent = *layer.transparent;
  }
  return absl::OkStatus();
}

absl::Status MergeAllowWrite(const PolicyLayer& layer, LayerTrust trust, Policy* policy) {
  if (!layer.allow_write) return absl::OkStatus();
  constexpr absl::string_view kKey = "filesystem.allowWrite";
  ASSIGN_OR_RETURN(std::vector<std::string> paths, NormalisePaths(layer, kKey, *layer.allow_write));
  if (trust == LayerTrust::kProject) {
    for (const std::string& path : paths) {
      bool covered = std::any_of(policy->allow_write.begin(), policy->allow_write.end(),
                                 [&](const std::string& root) { return IsPathUnder(path, root); });
      if (covered) continue;
      if (policy->allow_write.empty()) {
        return WideningError(
            layer, kKey,
            absl::StrCat(QuoteForMessage(path),
                         " is not allowed: the layers below allow writing nowhere; ", kTrustHint));
      }
      return WideningError(
          layer, kKey,
          absl::StrCat(QuoteForMessage(path), " is not inside a path the layers below allow (",
                       DescribeList(policy->allow_write), "); ", kTrustHint));
    }
  }
  policy->allow_write = std::move(paths);
  return absl::OkStatus();
}

// Deny lists only ever grow, whoever writes them.
absl::Status MergeDenyLists(const PolicyLayer& layer, Policy* policy) {
  if (layer.denied_domains) {
    ASSIGN_OR_RETURN(std::vector<DomainPattern> domains,
                     NormaliseDomains(layer, "network.deniedDomains", *layer.denied_domains,
                                      DomainPattern::ListKind::kDeny));
    for (DomainPattern& d : domains) AppendUnique(&policy->denied_domains, std::move(d));
  }
  if (layer.deny_read) {
    ASSIGN_OR_RETURN(std::vector<std::string> paths,
                     NormalisePaths(layer, "filesystem.denyRead", *layer.deny_read));
    for (std::string& p : paths) AppendUnique(&policy->deny_read, std::move(p));
  }
  if (layer.deny_write) {
    ASSIGN_OR_RETURN(std::vector<std::string> paths,
                     NormalisePaths(layer, "filesystem.denyWrite", *layer.deny_write));
    for (std::string& p : paths) AppendUnique(&policy->deny_write, std::move(p));
  }
  // Patterns are denials too: unions, from any layer.
  for (const auto& [list, key, out] :
       {std::tuple{&layer.deny_read_patterns, "filesystem.denyRead", &policy->deny_read_patterns},
        std::tuple{&layer.deny_write_patterns, "filesystem.denyWrite",
                   &policy->deny_write_patterns}}) {
    if (!*list) continue;
    for (const std::string& text : **list) {
      absl::StatusOr<PathPattern> pattern = PathPattern::FromString(text);
      if (!pattern.ok()) return KeyError(layer, key, pattern.status().message());
      AppendUnique(out, pattern->ToString());
    }
  }
  return absl::OkStatus();
}

absl::Status MergeEnv(const PolicyLayer& layer, Policy* policy) {
  for (const auto& [name, value] : layer.env) {
    if (absl::Status s = ValidateEnvVar(name, value); !s.ok()) {
      return KeyError(layer, absl::StrCat("env.", name), s.message());
    }
    OverrideEnv(&policy->env, {{name, value}});
  }
  return absl::OkStatus();
}

bool LayerIsEmpty(const PolicyLayer& l) {
  return !l.memory_bytes && !l.pids && !l.tmpfs_bytes && !l.cpus && !l.cpu_timeout &&
         !l.wall_timeout && !l.allowed_domains && !l.denied_domains && !l.allowed_cidrs &&
         !l.dns_servers && !l.max_request_body_bytes && !l.requests_per_minute && !l.transparent &&
         !l.deny_read && !l.allow_write && !l.deny_write && !l.deny_read_patterns &&
         !l.deny_write_patterns && !l.hide_home && l.env.empty();
}

std::string JoinPath(absl::string_view base, absl::string_view relative) {
  return NormalizeAbsolutePath(absl::StrCat(base, "/", relative));
}

}  // namespace

bool IsPathPattern(absl::string_view raw) { return raw.find_first_of("*?[") != raw.npos; }

bool GlobMatches(absl::string_view glob, absl::string_view name) {
  return ::fnmatch(std::string(glob).c_str(), std::string(name).c_str(), FNM_PERIOD) == 0;
}

std::string PathPattern::ToString() const {
  return absl::StrCat(dir == "/" ? "" : dir, recursive ? "/**/" : "/", glob);
}

absl::StatusOr<PathPattern> PathPattern::FromString(absl::string_view text) {
  size_t slash = text.rfind('/');
  if (slash == absl::string_view::npos || !absl::StartsWith(text, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern ", QuoteForMessage(text), " is not absolute; resolve it first"));
  }
  PathPattern p;
  p.glob = std::string(text.substr(slash + 1));
  absl::string_view dir = text.substr(0, slash);
  if (dir == "/**" || absl::EndsWith(dir, "/**")) {
    p.recursive = true;
    dir.remove_suffix(3);
  }
  p.dir = dir.empty() ? "/" : std::string(dir);
  if (p.glob.empty() || IsPathPattern(p.dir) || p.dir != NormalizeAbsolutePath(p.dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern ", QuoteForMessage(text), " is not a normalised pattern"));
  }
  return p;
}

absl::StatusOr<PathPattern> ResolvePathPattern(absl::string_view raw, const PathContext& paths) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid pattern ", QuoteForMessage(raw), ": ", why));
  };
  for (char ch : raw) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == 0 || c < 0x20 || c == 0x7f) return invalid("contains a NUL or control byte");
  }
  PathPattern p;
  size_t slash = raw.rfind('/');
  if (slash == absl::string_view::npos) {
    // "*.pem": files of that name anywhere below the project.
    if (!absl::StartsWith(paths.cwd, "/")) {
      return invalid("a pattern without a directory needs the project directory");
    }
    p.dir = NormalizeAbsolutePath(paths.cwd);
    p.recursive = true;
    p.glob = std::string(raw);
  } else {
    absl::string_view dir = raw.substr(0, slash);
    p.glob = std::string(raw.substr(slash + 1));
    if (IsPathPattern(dir)) {
      return invalid(
          "only the last component may be a pattern (write \"*.pem\" for any depth below the "
          "project, or \"DIR/*.pem\" for one directory)");
    }
    ASSIGN_OR_RETURN(p.dir, ResolvePolicyPath(dir.empty() ? "/" : dir, paths));
  }
  if (p.glob.empty() || p.glob == "**" || p.glob == "." || p.glob == "..") {
    return invalid("the last component must be a file name pattern, e.g. \"*.pem\"");
  }
  return p;
}

absl::StatusOr<std::string> ResolvePolicyPath(absl::string_view raw, const PathContext& paths) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid path ", QuoteForMessage(raw), ": ", why));
  };
  if (raw.empty()) return invalid("it is empty");
  for (char ch : raw) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == 0) return invalid("contains a NUL byte");
    if (c < 0x20 || c == 0x7f) return invalid("contains a control byte");
    if (c == '*' || c == '?' || c == '[') {
      return invalid(
          "glob patterns are only for filesystem.denyRead and filesystem.denyWrite; list each "
          "path here");
    }
  }
  std::string absolute;
  if (raw == "~" || absl::StartsWith(raw, "~/")) {
    if (!absl::StartsWith(paths.home, "/")) {
      return invalid(
          "\"~\" needs the home directory, which is not known here; write the full path");
    }
    absolute = absl::StrCat(paths.home, "/", raw.substr(1));
  } else if (absl::StartsWith(raw, "~")) {
    return invalid("\"~user\" is not supported; write the full path");
  } else if (absl::StartsWith(raw, "/")) {
    absolute = std::string(raw);
  } else {
    if (!absl::StartsWith(paths.cwd, "/")) {
      return invalid("a relative path needs the working directory, which is not known here");
    }
    absolute = absl::StrCat(paths.cwd, "/", raw);
  }
  std::string normalised = NormalizeAbsolutePath(absolute);
  if (normalised.size() > kMaxPathLength) return invalid("longer than PATH_MAX");
  return normalised;
}

std::string DescribeSource(absl::string_view source) {
  if (absl::StrContains(source, '/') || absl::EndsWith(source, ".yaml") ||
      absl::EndsWith(source, ".yml") || absl::EndsWith(source, ".json")) {
    return absl::StrCat("policy file ", QuoteForMessage(source));
  }
  return std::string(source);
}

absl::Status ValidateEnvVar(absl::string_view name, absl::string_view value) {
  bool valid = !name.empty() && (absl::ascii_isalpha(name[0]) || name[0] == '_');
  for (char c : name) valid = valid && (absl::ascii_isalnum(c) || c == '_');
  if (!valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid environment variable name ", QuoteForMessage(name),
                     " (use letters, digits and \"_\", not starting with a digit)"));
  }
  if (absl::StrContains(value, '\0')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the value of ", name, " contains a NUL byte, which the environment cannot hold"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMemory(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("the memory limit must be above 0 (e.g. 512M)");
  return absl::OkStatus();
}

absl::Status ValidatePids(uint64_t pids) {
  if (pids == 0 || pids > kMaxPids) {
    return absl::InvalidArgumentError(
        absl::StrCat("the process limit must be from 1 to ", kMaxPids, ", not ", pids));
  }
  return absl::OkStatus();
}

absl::Status ValidateCpus(double cpus) {
  if (!(cpus > 0) || !(cpus <= kMaxCpus)) {  // written so that NaN fails too
    return absl::InvalidArgumentError(
        absl::StrCat("the CPU count must be above 0 and at most 1024, not ", cpus));
  }
  return absl::OkStatus();
}

absl::Status ValidateTimeout(absl::Duration timeout) {
  if (timeout < kMinTimeout || timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a timeout must be at least 1ms and finite, not ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

absl::Status ValidateTmpfsSize(uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("the tmpfs size must be above 0 (e.g. 64M)");
  }
  return absl::OkStatus();
}

absl::Status ValidateRequestBodyCap(uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        "the request body cap must be above 0 (e.g. 16M); deny the domains instead");
  }
  return absl::OkStatus();
}

absl::Status ValidateRequestsPerMinute(uint64_t n) {
  if (n == 0 || n > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request rate must be between 1 and 1000000 per minute, not ", n));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NormaliseCidr(absl::string_view text) {
  ASSIGN_OR_RETURN(egress::Cidr cidr, egress::Cidr::Parse(text));
  return cidr.ToString();
}

absl::StatusOr<std::string> NormaliseDnsServer(absl::string_view text) {
  ASSIGN_OR_RETURN(egress::DnsServer server, egress::ParseDnsServer(text));
  return server.ToString();
}

absl::Status ApplyLayer(const PolicyLayer& layer, LayerTrust trust, Policy* policy) {
  // Merge into a copy so that a rejected layer leaves no partial change behind.
  Policy merged = *policy;
  RETURN_IF_ERROR(MergeLimits(layer, trust, &merged.limits));
  RETURN_IF_ERROR(MergeAllowedDomains(layer, trust, &merged));
  RETURN_IF_ERROR(MergeEgress(layer, trust, &merged));
  RETURN_IF_ERROR(MergeAllowWrite(layer, trust, &merged));
  RETURN_IF_ERROR(MergeDenyLists(layer, &merged));
  if (layer.hide_home) {
    if (trust == LayerTrust::kProject && !*layer.hide_home) {
      return WideningError(layer, "filesystem.hideHome",
                           "a project policy may not show the home directory; set hideHome: "
                           "false in ~/.config/moat/policy.yaml or with --policy if you want that");
    }
    merged.hide_home = *layer.hide_home;
  }
  RETURN_IF_ERROR(MergeEnv(layer, &merged));
  if (!layer.source.empty()) merged.sources.push_back(layer.source);
  *policy = std::move(merged);
  return absl::OkStatus();
}

Policy DefaultPolicy(const PathContext& paths) {
  Policy policy;
  if (absl::StartsWith(paths.home, "/")) {
    for (absl::string_view name : kDefaultDenyReadUnderHome) {
      policy.deny_read.push_back(JoinPath(paths.home, name));
    }
  }
  return policy;
}

std::string UserPolicyPath(const PathContext& paths) {
  if (paths.home.empty()) return "";
  return JoinPath(paths.home, ".config/moat/policy.yaml");
}

std::vector<std::string> ProjectPolicyPaths(const PathContext& paths) {
  return {JoinPath(paths.cwd, ".moat/policy.yaml"), JoinPath(paths.cwd, ".pi/sandbox.json")};
}

std::vector<std::string> MandatoryDenyWrite(const Policy& policy, const PathContext& paths) {
  auto writable = [&](const std::string& path) {
    return std::any_of(policy.allow_write.begin(), policy.allow_write.end(),
                       [&](const std::string& root) { return IsPathUnder(path, root); });
  };
  // The project directory is a root of its own when it is writable: its agent configuration
  // (.pi, .moat, ...) is what the next run on the host reads.
  std::vector<std::string> roots = policy.allow_write;
  if (absl::StartsWith(paths.cwd, "/") && writable(paths.cwd)) AppendUnique(&roots, paths.cwd);
  std::vector<std::string> candidates;
  for (const std::string& root : roots) {
    for (absl::string_view name : ProtectedUnderEachRoot()) {
      candidates.push_back(JoinPath(root, name));
    }
  }
  if (absl::StartsWith(paths.home, "/")) {
    for (absl::string_view name : ProtectedUnderHome()) {
      std::string path = JoinPath(paths.home, name);
      if (writable(path)) candidates.push_back(std::move(path));
    }
  }
  std::vector<std::string> out;
  for (std::string& path : candidates) {
    bool denied = std::any_of(policy.deny_write.begin(), policy.deny_write.end(),
                              [&](const std::string& d) { return IsPathUnder(path, d); });
    if (!denied) AppendUnique(&out, std::move(path));
  }
  return out;
}

namespace {

// What a pattern matches now: names in its directory, or at any depth below it (not following
// symlinks, not descending into what matched). Fails, rather than protect part of it, when the
// tree is too large to walk before a run.
absl::Status MatchPattern(const PathPattern& pattern, std::vector<std::string>* out) {
  constexpr size_t kMaxEntries = 50000;
  constexpr int kMaxDepth = 32;
  size_t seen = 0;
  std::function<absl::Status(const std::string&, int)> walk = [&](const std::string& dir,
                                                                  int depth) -> absl::Status {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return absl::OkStatus();  // missing or unreadable: nothing there to match
    std::vector<std::string> subdirs;
    while (struct dirent* e = ::readdir(d)) {
      absl::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (++seen > kMaxEntries) {
        ::closedir(d);
        return absl::ResourceExhaustedError(absl::StrCat(
            "pattern ", QuoteForMessage(pattern.ToString()), ": more than ", kMaxEntries,
            " entries below ", QuoteForMessage(pattern.dir),
            " to look through; name a narrower directory (\"DIR/", pattern.glob, "\")"));
      }
      std::string path = dir == "/" ? absl::StrCat("/", name) : absl::StrCat(dir, "/", name);
      if (GlobMatches(pattern.glob, name)) {
        out->push_back(path);
      } else if (pattern.recursive && depth < kMaxDepth && e->d_type == DT_DIR) {
        subdirs.push_back(std::move(path));
      }
    }
    ::closedir(d);
    for (const std::string& sub : subdirs) RETURN_IF_ERROR(walk(sub, depth + 1));
    return absl::OkStatus();
  };
  return walk(pattern.dir, 0);
}

// Adds what the patterns match now to the deny lists, and says in `notes` what they mean for
// files made later.
absl::Status ExpandPatterns(Policy* policy) {
  for (bool write : {false, true}) {
    for (const std::string& text :
         write ? policy->deny_write_patterns : policy->deny_read_patterns) {
      ASSIGN_OR_RETURN(PathPattern pattern, PathPattern::FromString(text));
      std::vector<std::string> matches;
      RETURN_IF_ERROR(MatchPattern(pattern, &matches));
      for (std::string& m : matches) {
        AppendUnique(write ? &policy->deny_write : &policy->deny_read, std::move(m));
      }
      policy->notes.push_back(
          write ? absl::StrCat("denyWrite pattern ", QuoteForMessage(text), ": ", matches.size(),
                               " path(s) matched at start and are read-only; new files matching "
                               "it are refused in writable host directories")
                : absl::StrCat("denyRead pattern ", QuoteForMessage(text), ": ", matches.size(),
                               " path(s) matched at start and are hidden; files the sandbox "
                               "creates later are its own and are not hidden"));
    }
  }
  return absl::OkStatus();
}

// Records, for each value that `after` holds differently from `before`, that `source` set it.
void NoteOrigins(const Policy& before, const Policy& after, absl::string_view source,
                 PolicyOrigins* origins) {
  auto value = [&](const char* key, bool changed) {
    if (changed) origins->values[key] = std::string(source);
  };
  value("limits.memory", before.limits.memory_bytes != after.limits.memory_bytes);
  value("limits.pids", before.limits.pids != after.limits.pids);
  value("limits.cpus", before.limits.cpus != after.limits.cpus);
  value("limits.cpuTimeout", before.limits.cpu_timeout != after.limits.cpu_timeout);
  value("limits.wallTimeout", before.limits.wall_timeout != after.limits.wall_timeout);
  value("limits.tmpfsSize", before.limits.tmpfs_bytes != after.limits.tmpfs_bytes);
  value("network.maxRequestBodyBytes",
        before.egress.max_request_body_bytes != after.egress.max_request_body_bytes);
  value("network.requestsPerMinute",
        before.egress.requests_per_minute != after.egress.requests_per_minute);
  value("network.transparent", before.transparent != after.transparent);
  value("filesystem.hideHome", before.hide_home != after.hide_home);
  auto list = [&](const char* key, const auto& typed_was, const auto& typed_now) {
    const std::vector<std::string> was = Texts(typed_was), now = Texts(typed_now);
    std::map<std::string, std::string>& seen = origins->elements[key];
    for (const std::string& v : now) {
      if (std::find(was.begin(), was.end(), v) == was.end() || !seen.count(v)) {
        seen.emplace(v, std::string(source));
      }
    }
    for (auto it = seen.begin(); it != seen.end();) {
      it = std::find(now.begin(), now.end(), it->first) == now.end() ? seen.erase(it) : ++it;
    }
  };
  list("network.allowedDomains", before.allowed_domains, after.allowed_domains);
  list("network.deniedDomains", before.denied_domains, after.denied_domains);
  list("network.allowedCidrs", before.allowed_cidrs, after.allowed_cidrs);
  list("network.dnsServers", before.dns_servers, after.dns_servers);
  list("filesystem.denyRead", before.deny_read, after.deny_read);
  list("filesystem.allowWrite", before.allow_write, after.allow_write);
  list("filesystem.denyWrite", before.deny_write, after.deny_write);
  list("filesystem.denyReadPatterns", before.deny_read_patterns, after.deny_read_patterns);
  list("filesystem.denyWritePatterns", before.deny_write_patterns, after.deny_write_patterns);
  std::map<std::string, std::string>& env = origins->elements["env"];
  for (const auto& entry : after.env) {
    const std::string& name = entry.first;
    auto old = std::find_if(before.env.begin(), before.env.end(),
                            [&](const auto& e) { return e.first == name; });
    if (old == before.env.end() || old->second != entry.second || !env.count(name)) {
      env[name] = std::string(source);
    }
  }
}

}  // namespace

absl::StatusOr<Policy> ResolvePolicy(const PolicySources& sources, PolicyOrigins* origins) {
  const PathContext& paths = sources.paths;
  if (!absl::StartsWith(paths.cwd, "/")) {
    return absl::InvalidArgumentError(absl::StrCat("resolve policy: the working directory ",
                                                   QuoteForMessage(paths.cwd),
                                                   " is not an absolute path"));
  }
  Policy policy = DefaultPolicy(paths);
  if (origins != nullptr) {
    *origins = PolicyOrigins();
    Policy none;  // differs from the default in every value, so each is noted
    none.limits = {0, 0, 0, absl::ZeroDuration(), absl::ZeroDuration(), 0};
    none.egress = {0, 0};
    none.hide_home = !policy.hide_home;
    none.transparent = !policy.transparent;
    NoteOrigins(none, policy, "built-in default", origins);
  }
  auto apply = [&](const PolicyLayer& layer, LayerTrust trust) -> absl::Status {
    Policy before = origins != nullptr ? policy : Policy();
    RETURN_IF_ERROR(ApplyLayer(layer, trust, &policy));
    if (origins != nullptr) NoteOrigins(before, policy, layer.source, origins);
    return absl::OkStatus();
  };

  // Reads and applies one file; `optional` files that do not exist are skipped.
  auto apply_file = [&](const std::string& path, LayerTrust trust, bool optional) -> absl::Status {
    absl::StatusOr<PolicyLayer> layer = ParsePolicyFile(path, paths);
    if (optional && absl::IsNotFound(layer.status())) return absl::OkStatus();
    if (!layer.ok()) return layer.status();
    return apply(*layer, trust);
  };

  if (std::string user = UserPolicyPath(paths); !user.empty()) {
    RETURN_IF_ERROR(apply_file(user, LayerTrust::kTrusted, /*optional=*/true));
  }
  for (const std::string& file : sources.user_files) {
    RETURN_IF_ERROR(apply_file(file, LayerTrust::kTrusted, /*optional=*/false));
  }
  for (const std::string& project : ProjectPolicyPaths(paths)) {
    RETURN_IF_ERROR(apply_file(project, LayerTrust::kProject, /*optional=*/true));
  }
  if (sources.explicit_file) {
    RETURN_IF_ERROR(apply_file(*sources.explicit_file, LayerTrust::kTrusted, /*optional=*/false));
  }
  if (!LayerIsEmpty(sources.flags)) {
    PolicyLayer flags = sources.flags;
    if (flags.source.empty()) flags.source = "command line";
    RETURN_IF_ERROR(apply(flags, LayerTrust::kTrusted));
  }
  RETURN_IF_ERROR(ExpandPatterns(&policy));
  Policy before = origins != nullptr ? policy : Policy();
  for (std::string& path : MandatoryDenyWrite(policy, paths)) {
    policy.deny_write.push_back(std::move(path));
  }
  if (origins != nullptr) NoteOrigins(before, policy, "moat (protected path)", origins);
  return policy;
}

}  // namespace moat::sandbox
