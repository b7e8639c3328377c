// A DNS server as policies name it (network.dnsServers) and resolv.conf lists it: parsed once,
// at the edge, and carried as a value from there on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/values/ip_address.h"

namespace moat::egress {

struct DnsServer {
  IpAddress address;
  uint16_t port = 53;
  std::string ToString() const;  // "1.1.1.1:53", "[::1]:53"
  friend bool operator==(const DnsServer&, const DnsServer&) = default;
};

// "192.0.2.53", "127.0.0.1:5353", "::1", "[::1]:5353". The message says what is wrong.
absl::StatusOr<DnsServer> ParseDnsServer(absl::string_view text);

// The `nameserver` lines of a resolv.conf text, in order (malformed lines are skipped, as the
// C library does).
std::vector<DnsServer> ParseResolvConf(absl::string_view text);

}  // namespace moat::egress
