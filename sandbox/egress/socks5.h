// The SOCKS5 wire format (RFC 1928) as far as the egress proxy speaks it: the method greeting
// (only "no authentication"), the CONNECT request with IPv4, domain or IPv6 addresses, and
// replies. Parsing works on whatever has arrived so far and says when more is needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/values/ip_address.h"

namespace moat::egress {

inline constexpr uint8_t kSocksVersion = 5;
inline constexpr uint8_t kSocksMethodNoAuth = 0x00;
inline constexpr uint8_t kSocksMethodNone = 0xff;  // "no acceptable methods"
inline constexpr uint8_t kSocksCommandConnect = 0x01;
inline constexpr uint8_t kSocksAtypIpv4 = 0x01;
inline constexpr uint8_t kSocksAtypDomain = 0x03;
inline constexpr uint8_t kSocksAtypIpv6 = 0x04;

enum class SocksReply : uint8_t {
  kSucceeded = 0x00,
  kGeneralFailure = 0x01,
  kNotAllowed = 0x02,  // policy denial and rate limit
  kNetworkUnreachable = 0x03,
  kHostUnreachable = 0x04,  // resolution failed, dial timed out
  kConnectionRefused = 0x05,
  kCommandNotSupported = 0x07,  // BIND, UDP ASSOCIATE
  kAddressTypeNotSupported = 0x08,
};

// VER NMETHODS METHODS. Sets *no_auth when method 0x00 is offered. Returns the bytes it used, or
// 0 when `buffer` does not hold the whole greeting yet. InvalidArgument when VER is not 5.
absl::StatusOr<size_t> ParseSocksGreeting(absl::string_view buffer, bool* no_auth);

struct SocksRequest {
  uint8_t command = 0;
  uint8_t address_type = 0;
  // The domain's bytes verbatim (they may hold anything, NUL included: CanonicalizeHost decides),
  // or the text of the IPv4 / IPv6 address.
  std::string host;
  uint16_t port = 0;
};

// VER CMD RSV ATYP DST.ADDR DST.PORT. Returns the bytes used, or 0 when incomplete.
// InvalidArgument for a bad VER, RSV or an empty domain; Unimplemented for an unknown ATYP (reply
// kAddressTypeNotSupported; the length of the rest is unknowable, so the connection ends).
absl::StatusOr<size_t> ParseSocksRequest(absl::string_view buffer, SocksRequest* out);

// VER REP RSV ATYP BND.ADDR BND.PORT, with `bound` (the proxy's end of the upstream connection)
// or 0.0.0.0:0 when there is none.
std::string SocksReplyMessage(SocksReply reply, const std::optional<IpAddress>& bound_address,
                              uint16_t bound_port);

}  // namespace moat::egress
