#include "sandbox/egress/rules.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moat::egress {
namespace {

using sandbox::DomainPattern;

absl::StatusOr<std::vector<DomainPattern>> ParseList(const std::vector<std::string>& texts,
                                                     DomainPattern::ListKind kind,
                                                     absl::string_view key) {
  std::vector<DomainPattern> out;
  for (const std::string& text : texts) {
    absl::StatusOr<DomainPattern> pattern = DomainPattern::Parse(text, kind);
    if (!pattern.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": ", pattern.status().message()));
    }
    out.push_back(*std::move(pattern));
  }
  return out;
}

bool IsIpv6(const CanonicalHost& host) {
  return host.literal.has_value() && !host.literal->is_v4();
}

// DomainPattern has no IPv6 syntax, so no allow entry can name an IPv6 literal; saying so beats a
// bare "not in allowedDomains" that would send the user looking for a typo.
Decision Ipv6Denied() {
  return {false, "not in allowedDomains (IPv6 literals cannot be listed there; use a host name)"};
}

Decision DeniedBy(const DomainPattern& pattern) {
  return {false, absl::StrCat("denied by deniedDomains entry \"", pattern.ToString(), "\"")};
}

Decision AllowedBy(const DomainPattern& pattern) {
  return {true, absl::StrCat("allowed by \"", pattern.ToString(), "\"")};
}

// Whether `pattern` matches the host at some port: entries without a port match every port, so
// any port will do; entries with one are asked about theirs.
bool MatchesName(const DomainPattern& pattern, absl::string_view host) {
  return pattern.Matches(host, pattern.port().value_or(0));
}

}  // namespace

absl::StatusOr<EgressRules> EgressRules::Create(std::vector<DomainPattern> allowed,
                                                std::vector<DomainPattern> denied) {
  for (const DomainPattern& pattern : allowed) {
    // The allow-list parser refuses exactly these; a pattern parsed for a deny list may hold them.
    if (absl::Status wide = DomainPattern::Parse(pattern.ToString()).status(); !wide.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("network.allowedDomains: ", wide.message()));
    }
  }
  EgressRules rules;
  rules.allowed_ = std::move(allowed);
  rules.denied_ = std::move(denied);
  return rules;
}

absl::StatusOr<EgressRules> EgressRules::Parse(const std::vector<std::string>& allowed,
                                               const std::vector<std::string>& denied) {
  absl::StatusOr<std::vector<DomainPattern>> allow =
      ParseList(allowed, DomainPattern::ListKind::kAllow, "network.allowedDomains");
  if (!allow.ok()) return allow.status();
  absl::StatusOr<std::vector<DomainPattern>> deny =
      ParseList(denied, DomainPattern::ListKind::kDeny, "network.deniedDomains");
  if (!deny.ok()) return deny.status();
  return Create(*std::move(allow), *std::move(deny));
}

Decision EgressRules::Decide(const CanonicalHost& host, uint16_t port) const {
  if (IsIpv6(host)) return Ipv6Denied();
  for (const DomainPattern& pattern : denied_) {
    if (pattern.Matches(host.text, port)) return DeniedBy(pattern);
  }
  for (const DomainPattern& pattern : allowed_) {
    if (pattern.Matches(host.text, port)) return AllowedBy(pattern);
  }
  return {false, "not in allowedDomains"};
}

Decision EgressRules::DecideName(const CanonicalHost& host) const {
  if (IsIpv6(host)) return Ipv6Denied();
  // A port-less deny entry shuts the name on every port.
  for (const DomainPattern& pattern : denied_) {
    if (!pattern.port().has_value() && pattern.Matches(host.text, 0)) return DeniedBy(pattern);
  }
  // Otherwise the name resolves if some allow entry opens a port that no deny entry closes: a
  // port-less allow entry always does (deny entries here all name one port).
  const DomainPattern* blocked_by = nullptr;
  for (const DomainPattern& allow : allowed_) {
    if (!MatchesName(allow, host.text)) continue;
    if (!allow.port().has_value()) return AllowedBy(allow);
    auto deny = std::find_if(denied_.begin(), denied_.end(), [&](const DomainPattern& d) {
      return d.Matches(host.text, *allow.port());
    });
    if (deny == denied_.end()) return AllowedBy(allow);
    if (blocked_by == nullptr) blocked_by = &*deny;
  }
  if (blocked_by != nullptr) return DeniedBy(*blocked_by);
  return {false, "not in allowedDomains"};
}

std::vector<uint16_t> EgressRules::AllowedPorts(const CanonicalHost& host, bool* any_port) const {
  bool any = false;
  std::vector<uint16_t> ports;
  if (DecideName(host).allowed) {
    for (const DomainPattern& allow : allowed_) {
      if (!MatchesName(allow, host.text)) continue;
      if (!allow.port().has_value()) {
        any = true;
        break;
      }
      if (Decide(host, *allow.port()).allowed) ports.push_back(*allow.port());
    }
  }
  if (any) ports.clear();
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  if (any_port != nullptr) *any_port = any;
  return ports;
}

}  // namespace moat::egress
