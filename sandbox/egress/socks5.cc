#include "sandbox/egress/socks5.h"

#include <cstring>

namespace moat::egress {
namespace {

uint8_t Byte(absl::string_view b, size_t i) { return static_cast<uint8_t>(b[i]); }

}  // namespace

absl::StatusOr<size_t> ParseSocksGreeting(absl::string_view buffer, bool* no_auth) {
  if (buffer.empty()) return 0;
  if (Byte(buffer, 0) != kSocksVersion) {
    return absl::InvalidArgumentError("not a SOCKS5 greeting (version byte is not 5)");
  }
  if (buffer.size() < 2) return 0;
  const size_t n = Byte(buffer, 1);
  if (buffer.size() < 2 + n) return 0;
  *no_auth = false;
  for (size_t i = 0; i < n; ++i) {
    if (Byte(buffer, 2 + i) == kSocksMethodNoAuth) *no_auth = true;
  }
  return 2 + n;
}

absl::StatusOr<size_t> ParseSocksRequest(absl::string_view buffer, SocksRequest* out) {
  if (buffer.size() < 4) return 0;
  if (Byte(buffer, 0) != kSocksVersion) {
    return absl::InvalidArgumentError("not a SOCKS5 request (version byte is not 5)");
  }
  if (Byte(buffer, 2) != 0) return absl::InvalidArgumentError("SOCKS5 reserved byte is not 0");
  out->command = Byte(buffer, 1);
  out->address_type = Byte(buffer, 3);
  size_t address_end;
  switch (out->address_type) {
    case kSocksAtypIpv4: {
      address_end = 4 + 4;
      if (buffer.size() < address_end + 2) return 0;
      uint32_t v4 = 0;
      for (int i = 0; i < 4; ++i) v4 = (v4 << 8) | Byte(buffer, 4 + i);
      out->host = IpAddress::V4(v4).ToString();
      break;
    }
    case kSocksAtypDomain: {
      if (buffer.size() < 5) return 0;
      const size_t length = Byte(buffer, 4);
      if (length == 0) return absl::InvalidArgumentError("an empty SOCKS5 domain name");
      address_end = 5 + length;
      if (buffer.size() < address_end + 2) return 0;
      out->host = std::string(buffer.substr(5, length));
      break;
    }
    case kSocksAtypIpv6: {
      address_end = 4 + 16;
      if (buffer.size() < address_end + 2) return 0;
      std::array<uint8_t, 16> v6;
      std::memcpy(v6.data(), buffer.data() + 4, 16);
      out->host = IpAddress::V6(v6).ToString();
      break;
    }
    default:
      return absl::UnimplementedError("unknown SOCKS5 address type");
  }
  out->port = static_cast<uint16_t>(Byte(buffer, address_end) << 8 | Byte(buffer, address_end + 1));
  return address_end + 2;
}

std::string SocksReplyMessage(SocksReply reply, const std::optional<IpAddress>& bound_address,
                              uint16_t bound_port) {
  std::string out = {static_cast<char>(kSocksVersion), static_cast<char>(reply), 0};
  const IpAddress address = bound_address.value_or(IpAddress::V4(0));
  if (address.is_v4()) {
    out.push_back(static_cast<char>(kSocksAtypIpv4));
    for (int shift = 24; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>(address.v4() >> shift));
    }
  } else {
    out.push_back(static_cast<char>(kSocksAtypIpv6));
    out.append(reinterpret_cast<const char*>(address.v6().data()), 16);
  }
  out.push_back(static_cast<char>(bound_port >> 8));
  out.push_back(static_cast<char>(bound_port));
  return out;
}

}  // namespace moat::egress
