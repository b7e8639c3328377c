#include "sandbox/egress/target.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/values/domain_pattern.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace moat::egress {
namespace {

constexpr size_t kMaxHostLength = 253;  // RFC 1035 2.3.4, without the trailing dot

absl::Status Invalid(absl::string_view host, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid host ", QuoteForMessage(host), ": ", why));
}

// The first byte that no host (name, IPv4 or bracketed IPv6 literal) may contain, described for
// the message; nullopt when every byte is a letter, digit, '-', '.', ':', '[' or ']'.
std::optional<std::string> BadByte(absl::string_view host) {
  for (char ch : host) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == ':' || c == '[' || c == ']') {
      continue;
    }
    if (c == 0) return "contains a NUL byte";
    if (c < 0x20 || c == 0x7f) return "contains a control byte";
    if (c >= 0x80) return "contains a non-ASCII byte; international names must be in punycode";
    switch (c) {
      case ' ':
        return "contains a space";
      case '%':
        return "contains \"%\"; percent-encoding and IPv6 zone ids are not allowed";
      case '@':
        return "contains \"@\"; user info is not allowed";
      case '/':
        return "contains \"/\"; give only the host, not a path";
      case '\\':
        return "contains a backslash";
      case '_':
        return "contains \"_\", which is not allowed in host names";
      default:
        return absl::StrCat("contains the character \"", std::string(1, ch),
                            "\"; only letters, digits, \"-\" and \".\" are allowed");
    }
  }
  return std::nullopt;
}

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

// Whether resolvers and URL parsers would take a host ending in `label` for an IPv4 address
// (inet_aton, and the WHATWG URL "ends in a number" rule): all digits, or "0x" and hex digits.
bool IsNumericLabel(absl::string_view label) {
  if (AllDigits(label)) return true;
  if (!absl::StartsWith(label, "0x")) return false;
  return std::all_of(label.begin() + 2, label.end(),
                     [](char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); });
}

// One part of an inet_aton address (lower-cased): hex after "0x", octal after a leading "0" (so
// "08" is refused, never read as eight), decimal otherwise. nullopt for anything else, for a bare
// "0x" (glibc refuses it; URL parsers read 0), and for a value over 32 bits.
std::optional<uint32_t> ParseAtonPart(absl::string_view part) {
  if (part.empty()) return std::nullopt;
  uint64_t base = 10;
  if (absl::StartsWith(part, "0x")) {
    base = 16;
    part.remove_prefix(2);
    if (part.empty()) return std::nullopt;
  } else if (part.size() > 1 && part[0] == '0') {
    base = 8;
    part.remove_prefix(1);
  }
  uint64_t value = 0;
  for (char c : part) {
    uint64_t digit;
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      digit = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    if (digit >= base) return std::nullopt;
    value = value * base + digit;
    if (value > 0xffffffffu) return std::nullopt;
  }
  return static_cast<uint32_t>(value);
}

// inet_aton's forms: "a" (32 bits), "a.b" (b: 24 bits), "a.b.c" (c: 16 bits), "a.b.c.d"; every
// part but the last is one byte.
absl::StatusOr<IpAddress> ParseNumericIpv4(absl::string_view raw, absl::string_view host) {
  std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.size() > 4) {
    return Invalid(raw, "a numeric host has at most four parts; names cannot end in a number");
  }
  std::vector<uint32_t> values;
  for (absl::string_view part : parts) {
    std::optional<uint32_t> value = ParseAtonPart(part);
    if (!value.has_value()) {
      return Invalid(raw, absl::StrCat("\"", part,
                                       "\" is not a decimal, octal (0...) or hex (0x...) number; "
                                       "names cannot end in a number"));
    }
    values.push_back(*value);
  }
  uint32_t address = 0;
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    if (values[i] > 0xff) return Invalid(raw, "a part of the IPv4 address is over 255");
    address |= values[i] << (8 * (3 - i));
  }
  int last_bits = 8 * static_cast<int>(5 - values.size());
  uint64_t last_max = (uint64_t{1} << last_bits) - 1;
  if (values.back() > last_max) {
    return Invalid(raw, absl::StrCat("the last part of the IPv4 address is over ", last_max));
  }
  return IpAddress::V4(address | values.back());
}

absl::StatusOr<CanonicalHost> CanonicalizeIpv6(absl::string_view raw) {
  absl::string_view inner = raw;
  if (absl::StartsWith(raw, "[") || absl::EndsWith(raw, "]")) {
    if (raw.size() < 2 || raw.front() != '[' || raw.back() != ']') {
      return Invalid(raw, "unbalanced brackets around an IPv6 address");
    }
    inner.remove_prefix(1);
    inner.remove_suffix(1);
  }
  std::optional<IpAddress> address = IpAddress::Parse(inner);
  if (!address.has_value() || address->is_v4()) {
    return Invalid(raw, "not a valid IPv6 address");
  }
  // An IPv4-mapped address is dialled as the IPv4 address, so it is matched as one.
  // (Only the mapped form: IPv4-compatible and NAT64 addresses are dialled as IPv6, though the
  // address checks judge them by the IPv4 address they embed.)
  IpAddress unmapped = address->Unmapped();
  if (unmapped.is_v4() && address->v6()[10] == 0xff && address->v6()[11] == 0xff) {
    return CanonicalHost{unmapped.ToString(), unmapped};
  }
  return CanonicalHost{address->ToString(), *address};
}

absl::StatusOr<uint16_t> ParsePort(absl::string_view port, absl::string_view authority) {
  if (!AllDigits(port) || port.size() > 5 || port[0] == '0') {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid port in ", QuoteForMessage(authority),
                     ": it must be a decimal number from 1 to 65535"));
  }
  uint32_t value = 0;
  for (char c : port) value = value * 10 + static_cast<uint32_t>(c - '0');
  if (value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid port in ", QuoteForMessage(authority), ": it is over 65535"));
  }
  return static_cast<uint16_t>(value);
}

}  // namespace

absl::StatusOr<CanonicalHost> CanonicalizeHost(absl::string_view raw) {
  if (raw.empty()) return Invalid(raw, "it is empty");
  if (std::optional<std::string> bad = BadByte(raw); bad.has_value()) return Invalid(raw, *bad);
  if (absl::StrContains(raw, ':') || absl::StrContains(raw, '[') || absl::StrContains(raw, ']')) {
    return CanonicalizeIpv6(raw);
  }
  std::string host = absl::AsciiStrToLower(raw);
  if (absl::EndsWith(host, ".")) host.pop_back();
  if (host.size() > kMaxHostLength) return Invalid(raw, "longer than 253 characters");

  absl::string_view last_label = host;
  if (size_t dot = host.rfind('.'); dot != std::string::npos) last_label = host.substr(dot + 1);
  if (IsNumericLabel(last_label)) {
    ASSIGN_OR_RETURN(IpAddress address, ParseNumericIpv4(raw, host));
    return CanonicalHost{address.ToString(), address};
  }
  // A name: the same label rules as the patterns it will be matched against.
  ASSIGN_OR_RETURN(std::string name, sandbox::CanonicalHost(raw));
  return CanonicalHost{std::move(name), std::nullopt};
}

absl::StatusOr<HostPort> ParseAuthority(absl::string_view authority, uint16_t default_port) {
  if (authority.empty()) return absl::InvalidArgumentError("invalid authority \"\": it is empty");
  absl::string_view host = authority;
  std::optional<absl::string_view> port_text;
  if (absl::StartsWith(authority, "[")) {
    size_t close = authority.find(']');
    if (close == absl::string_view::npos) return Invalid(authority, "missing \"]\"");
    host = authority.substr(0, close + 1);
    absl::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        return Invalid(authority, "only \":port\" may follow the bracketed IPv6 address");
      }
      port_text = rest.substr(1);
    }
  } else if (size_t colon = authority.find(':'); colon != absl::string_view::npos) {
    if (authority.find(':', colon + 1) != absl::string_view::npos) {
      return Invalid(authority, "IPv6 addresses must be in brackets, as in \"[::1]:443\"");
    }
    host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
  }
  HostPort out;
  ASSIGN_OR_RETURN(out.host, CanonicalizeHost(host));
  if (port_text.has_value()) {
    ASSIGN_OR_RETURN(out.port, ParsePort(*port_text, authority));
  } else if (default_port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid authority ", QuoteForMessage(authority), ": a port is required"));
  } else {
    out.port = default_port;
  }
  return out;
}

}  // namespace moat::egress
