#include "sandbox/egress/destination_check.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace moat::egress {

DestinationVerdict DestinationCheck::Check(const CanonicalHost& host, uint16_t port) const {
  using Outcome = DestinationVerdict::Outcome;
  DestinationVerdict verdict;
  const Decision decision = rules_->Decide(host, port);
  if (!decision.allowed) {
    verdict.outcome = Outcome::kDenied;
    verdict.reason = decision.reason;
    return verdict;
  }
  // After the rules, so requests that are refused anyway do not use up the allowance.
  if (!limiter_->TryAcquire()) {
    verdict.outcome = Outcome::kRateLimited;
    verdict.reason = absl::StrCat("over network.requestsPerMinute (", limiter_->per_minute(), ")");
    return verdict;
  }
  std::vector<IpAddress> addresses;
  if (host.literal) {
    addresses.push_back(*host.literal);
  } else {
    absl::StatusOr<std::vector<IpAddress>> resolved = resolver_->Resolve(host.text);
    if (!resolved.ok() || resolved->empty()) {
      verdict.outcome = Outcome::kUnresolvable;
      verdict.reason = absl::StrCat(
          "cannot resolve \"", host.text,
          "\": ", resolved.ok() ? "no addresses" : std::string(resolved.status().message()));
      return verdict;
    }
    addresses = *std::move(resolved);
  }
  for (const IpAddress& address : addresses) {
    const absl::Status allowed = addresses_->Check(address);
    if (allowed.ok()) {
      verdict.outcome = Outcome::kAllowed;
      verdict.reason = decision.reason;
      verdict.address = address;
      return verdict;
    }
    if (!verdict.address) {
      verdict.address = address;
      verdict.reason = std::string(allowed.message());
    }
  }
  verdict.outcome = Outcome::kDenied;
  return verdict;
}

}  // namespace moat::egress
