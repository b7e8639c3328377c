// The domain decision of network.allowedDomains / deniedDomains for one canonical target: deny
// wins over allow, and anything not allowed is denied. Shared by the HTTP/SOCKS5 proxy (host and
// port known) and the DNS stub (only the name known).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/egress/target.h"
#include "sandbox/values/domain_pattern.h"

namespace moat::egress {

struct Decision {
  bool allowed = false;
  // Why, for the audit log and violations: `allowed by "*.example.com"`,
  // `denied by deniedDomains entry "evil.example.com"`, `not in allowedDomains`.
  std::string reason;
};

class EgressRules {
 public:
  // The lists as the policy holds them (policy.h). An allow entry that would open everything or
  // a whole top-level domain ("*", "*.com": a deny list's pattern passed as an allow one) is
  // refused, whoever built the list.
  static absl::StatusOr<EgressRules> Create(std::vector<sandbox::DomainPattern> allowed,
                                            std::vector<sandbox::DomainPattern> denied);
  // From texts (tests, benches): each parsed for its list, the list's key named in errors.
  static absl::StatusOr<EgressRules> Parse(const std::vector<std::string>& allowed,
                                           const std::vector<std::string>& denied);

  // A connection to host:port.
  Decision Decide(const CanonicalHost& host, uint16_t port) const;

  // A DNS lookup, before any port is known: allowed when some port of `host` could be allowed,
  // i.e. an allow entry matches the name (with any port) and no port-less deny entry does.
  Decision DecideName(const CanonicalHost& host) const;

  // Ports the allow entries that match `host` name explicitly; empty when some matching entry has
  // no port (any port allowed). Transparent mode listens on these (or on 80 and 443 when empty).
  std::vector<uint16_t> AllowedPorts(const CanonicalHost& host, bool* any_port) const;

  bool empty() const { return allowed_.empty(); }

 private:
  std::vector<sandbox::DomainPattern> allowed_;
  std::vector<sandbox::DomainPattern> denied_;
};

}  // namespace moat::egress
