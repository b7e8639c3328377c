// The checks every proxied request passes, in order, whichever door it came through:
//   domain rules (deny wins) -> rate limit -> resolve once -> address policy on every address.
// The result names exactly one address to dial: the first resolved address that passed. The
// caller dials that address and nothing else, so a resolver that answers differently the next
// time (DNS rebinding) is never asked again. Canonicalising the host comes first and is done by
// the caller, because each protocol carries the host differently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sandbox/egress/rate_limiter.h"
#include "sandbox/egress/resolver.h"
#include "sandbox/egress/rules.h"
#include "sandbox/egress/target.h"
#include "sandbox/values/ip_address.h"

namespace moat::egress {

struct DestinationVerdict {
  enum class Outcome {
    kAllowed,
    kDenied,        // by the domain rules, or no resolved address may be dialled (403)
    kRateLimited,   // 429
    kUnresolvable,  // NXDOMAIN, no addresses, no DNS server answered (502)
  };
  Outcome outcome = Outcome::kDenied;
  // kAllowed: the rule's reason (`allowed by "example.com"`); otherwise why not.
  std::string reason;
  // kAllowed: the address to dial. kDenied by the address policy: the first refused address.
  std::optional<IpAddress> address;

  bool allowed() const { return outcome == Outcome::kAllowed; }
};

// Thread-safe when its parts are (they all are).
class DestinationCheck {
 public:
  // Everything must outlive the check.
  DestinationCheck(const EgressRules* rules, const AddressPolicy* addresses, Resolver* resolver,
                   RateLimiter* limiter)
      : rules_(rules), addresses_(addresses), resolver_(resolver), limiter_(limiter) {}

  DestinationVerdict Check(const CanonicalHost& host, uint16_t port) const;

 private:
  const EgressRules* rules_;
  const AddressPolicy* addresses_;
  Resolver* resolver_;
  RateLimiter* limiter_;
};

}  // namespace moat::egress
