// Address literals for egress tests, written as numbers so a test does not depend on the parser
// it may be testing.
#pragma once

#include <array>
#include <cstdint>

#include "sandbox/values/ip_address.h"

namespace moat::egress::testing {

// a.b.c.d
inline IpAddress V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return IpAddress::V4(uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d);
}

// 2001:db8::<last> (the documentation prefix)
inline IpAddress V6(uint8_t last) {
  std::array<uint8_t, 16> bytes{};
  bytes[0] = 0x20;
  bytes[1] = 0x01;
  bytes[2] = 0x0d;
  bytes[3] = 0xb8;
  bytes[15] = last;
  return IpAddress::V6(bytes);
}

}  // namespace moat::egress::testing
