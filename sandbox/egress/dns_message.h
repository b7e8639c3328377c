// The DNS wire format (RFC 1035), only as much as the stub and the resolver need: one question
// per message, A and AAAA answers, response codes. Parsing is bounds-checked everywhere: the
// queries come from sandboxed code and the responses from the network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sandbox/values/ip_address.h"

namespace moat::egress {

inline constexpr uint16_t kDnsTypeA = 1;
inline constexpr uint16_t kDnsTypeCname = 5;
inline constexpr uint16_t kDnsTypeAaaa = 28;
inline constexpr uint16_t kDnsClassIn = 1;

// The fixed header (RFC 1035 4.1.1): its size and flag bits, shared by the codec and the stub's
// header-only replies.
inline constexpr size_t kDnsHeaderSize = 12;
inline constexpr uint16_t kDnsFlagQr = 0x8000;
inline constexpr uint16_t kDnsFlagTc = 0x0200;
inline constexpr uint16_t kDnsFlagRd = 0x0100;
inline constexpr uint16_t kDnsFlagRa = 0x0080;
inline constexpr int kDnsOpcodeShift = 11;
inline constexpr uint16_t kDnsOpcodeMask = 0xF;

inline constexpr uint8_t kDnsNoError = 0;
inline constexpr uint8_t kDnsFormErr = 1;
inline constexpr uint8_t kDnsServFail = 2;
inline constexpr uint8_t kDnsNxDomain = 3;
inline constexpr uint8_t kDnsNotImp = 4;
inline constexpr uint8_t kDnsRefused = 5;

struct DnsQuestion {
  // The name as sent, labels joined with '.', no trailing dot, original case; bytes are not
  // interpreted (callers canonicalise with CanonicalizeHost, which refuses odd bytes).
  std::string name;
  uint16_t type = 0;
  uint16_t klass = 0;
};

struct DnsQuery {
  uint16_t id = 0;
  bool recursion_desired = false;
  DnsQuestion question;
};

// A query from a client: QR = 0, opcode QUERY, exactly one question, no compression loops,
// labels of 1-63 bytes, name at most 255 bytes on the wire. Anything else is InvalidArgument.
absl::StatusOr<DnsQuery> ParseDnsQuery(absl::Span<const uint8_t> message);

// The response to `query`: its id and question echoed, RA set, `rcode`, and one A or AAAA record
// (TTL `ttl`) per address whose family matches the question type (others are skipped).
std::vector<uint8_t> BuildDnsResponse(const DnsQuery& query, uint8_t rcode,
                                      absl::Span<const IpAddress> answers, uint32_t ttl);

// A recursive query for `name` (no trailing dot needed) of `type`.
std::vector<uint8_t> BuildDnsQuery(uint16_t id, absl::string_view name, uint16_t type);

struct DnsResponse {
  uint16_t id = 0;
  uint8_t rcode = 0;
  bool truncated = false;
  DnsQuestion question;
  // Every A/AAAA record of the answer section, following CNAMEs is left to the server (the
  // owner names are not checked against the question beyond the CNAME chain).
  std::vector<IpAddress> addresses;
  uint32_t min_ttl = 0;
};

// A response from an upstream server. InvalidArgument on malformed input.
absl::StatusOr<DnsResponse> ParseDnsResponse(absl::Span<const uint8_t> message);

}  // namespace moat::egress
