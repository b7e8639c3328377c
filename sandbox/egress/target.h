// Where a sandboxed client asked to go, canonicalised before any policy decision: the host names
// and numeric spellings that clients, resolvers and proxies disagree about are refused or reduced
// to one form, so allow and deny lists are matched against exactly what will be dialled.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/values/ip_address.h"

namespace moat::egress {

struct CanonicalHost {
  // Lower-case name without a trailing dot ("example.com"), or the dotted quad of an IPv4 literal
  // ("127.0.0.1" for "2130706433", "127.1", "0x7f.0.0.1", "0177.0.0.1", "::ffff:127.0.0.1"), or
  // the RFC 5952 text of an IPv6 literal ("::1"). This is what DomainPattern::Matches sees.
  std::string text;
  std::optional<IpAddress> literal;  // set for numeric hosts (IPv4-mapped IPv6 -> IPv4)
};

// Canonicalises a host as a client sent it (HTTP request target or Host header, CONNECT
// authority, SOCKS5 domain). IPv6 literals may be bracketed. Numeric IPv4 in every form
// inet_aton accepts (1 to 4 parts, decimal, octal with a leading 0, hex with 0x) becomes a dotted
// quad. Refused (InvalidArgument, message names the problem): empty hosts, NUL and other control
// bytes, '%' (percent-encoding and IPv6 zones), spaces, '/', '@', '\\', '_' and any other
// non-hostname character, empty labels, labels over 63 bytes, names over 253 bytes, non-ASCII,
// numeric parts out of range.
absl::StatusOr<CanonicalHost> CanonicalizeHost(absl::string_view raw);

struct HostPort {
  CanonicalHost host;
  uint16_t port = 0;
};

// Splits and canonicalises "host", "host:port", "[v6]", "[v6]:port". `default_port` is used when
// the port is absent; 0 means a port is required. Ports are 1-65535 in decimal, nothing else.
absl::StatusOr<HostPort> ParseAuthority(absl::string_view authority, uint16_t default_port);

}  // namespace moat::egress
