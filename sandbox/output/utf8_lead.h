// What a UTF-8 lead byte announces, shared by the output cleaning (sanitizer.cc) and the agent's
// JSON encoder (node-agent/api/sse_event.cc), which must agree on what is well-formed.
#pragma once

#include <cstdint>

namespace moat::sandbox {

// Unicode 15, table 3-7: the sequence length (1 for ASCII, 0 when the byte cannot start a
// sequence), the allowed range of the second byte, which excludes overlong forms, surrogates
// and code points above U+10FFFF, and the payload bits of the lead byte. Later bytes are 80..BF.
struct Utf8Lead {
  uint8_t len = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  uint32_t bits = 0;
};

inline Utf8Lead ClassifyUtf8Lead(unsigned char b) {
  if (b < 0x80) return {1, 0, 0, b};
  if (b < 0xC2) return {};  // a continuation byte, or C0/C1 (always overlong)
  if (b < 0xE0) return {2, 0x80, 0xBF, b & 0x1Fu};
  if (b == 0xE0) return {3, 0xA0, 0xBF, 0};
  if (b == 0xED) return {3, 0x80, 0x9F, 0x0D};  // ED A0..BF would be a surrogate
  if (b < 0xF0) return {3, 0x80, 0xBF, b & 0x0Fu};
  if (b == 0xF0) return {4, 0x90, 0xBF, 0};
  if (b < 0xF4) return {4, 0x80, 0xBF, b & 0x07u};
  if (b == 0xF4) return {4, 0x80, 0x8F, 4};
  return {};
}

}  // namespace moat::sandbox
