#include "sandbox/values/domain_pattern.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/units.h"

namespace moat::sandbox {
namespace {

constexpr size_t kMaxHostLength = 253;  // RFC 1035 2.3.4, without the trailing dot
constexpr size_t kMaxLabelLength = 63;

absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid domain ", QuoteForMessage(text), ": ", why));
}

// Refuses bytes that can never be part of a pattern, with a message naming the usual mistake.
// `allow_pattern_chars` admits "*" and ":" (patterns); client host names have neither.
absl::Status CheckBytes(absl::string_view text, bool allow_pattern_chars) {
  if (absl::StrContains(text, "://")) {
    return Invalid(text, "this is a URL; give only the host name, e.g. \"example.com\"");
  }
  for (char ch : text) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (absl::ascii_isalnum(c) || c == '-' || c == '.') continue;
    if (allow_pattern_chars && (c == '*' || c == ':')) continue;
    if (c == 0) return Invalid(text, "contains a NUL byte");
    if (c < 0x20 || c == 0x7f) return Invalid(text, "contains a control byte");
    if (c >= 0x80) {
      return Invalid(text,
                     "contains a non-ASCII byte; write international names in their "
                     "punycode form (xn--...)");
    }
    switch (c) {
      case ' ':
        return Invalid(text, "contains a space");
      case '/':
        return Invalid(text, "contains \"/\"; give only the host name, not a path");
      case '@':
        return Invalid(text, "contains \"@\"; give only the host name, without user info");
      case '%':
        return Invalid(text, "contains \"%\"; percent-encoding and zone ids are not allowed");
      case '_':
        return Invalid(text, "contains \"_\", which is not allowed in host names");
      case '[':
      case ']':
        return Invalid(text, "IPv6 literals are not supported");
      case '*':
        return Invalid(text, "a host name cannot contain \"*\"");
      case ':':
        return Invalid(text, "a host name cannot contain \":\"");
      default:
        return Invalid(text, absl::StrCat("contains the character \"", std::string(1, ch),
                                          "\"; only letters, digits, \"-\" and \".\" are allowed"));
    }
  }
  return absl::OkStatus();
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// Whether a resolver or URL parser would read the label as a number: decimal, or hex with "0x"
// (inet_aton and the WHATWG URL parser take "0x7f000001" and "127.0.0.0x1" as addresses).
bool LooksNumeric(absl::string_view label) {
  if (AllDigits(label)) return true;
  if (!absl::StartsWith(label, "0x")) return false;
  for (char c : label.substr(2)) {
    if (!absl::ascii_isxdigit(c)) return false;
  }
  return true;
}

// A dotted quad with each part 0-255 and no leading zeros ("010" is octal to some resolvers).
bool IsCanonicalIpv4(const std::vector<absl::string_view>& labels) {
  if (labels.size() != 4) return false;
  for (absl::string_view label : labels) {
    if (!AllDigits(label) || label.size() > 3 || (label.size() > 1 && label[0] == '0')) {
      return false;
    }
    int value = 0;
    if (!absl::SimpleAtoi(label, &value) || value > 255) return false;
  }
  return true;
}

// Checks a lower-cased host without wildcard or port. `text` is the original, for messages.
absl::Status CheckHost(absl::string_view host, absl::string_view text, bool* is_ipv4) {
  if (host.empty()) return Invalid(text, "the host name is empty");
  if (host.size() > kMaxHostLength) return Invalid(text, "longer than 253 characters");
  std::vector<absl::string_view> labels = absl::StrSplit(host, '.');
  for (absl::string_view label : labels) {
    if (label.empty()) return Invalid(text, "has an empty label (\"..\" or a leading dot)");
    if (label.size() > kMaxLabelLength)
      return Invalid(text, "has a label longer than 63 characters");
    if (label.front() == '-' || label.back() == '-') {
      return Invalid(text, "has a label that starts or ends with \"-\"");
    }
  }
  // A name whose last label is numeric is an address to resolvers, not a name.
  *is_ipv4 = LooksNumeric(labels.back());
  if (*is_ipv4 && !IsCanonicalIpv4(labels)) {
    return Invalid(text,
                   "numeric hosts must be dotted-quad IPv4 addresses without leading zeros, like "
                   "\"192.0.2.1\"");
  }
  return absl::OkStatus();
}

// Lower-cases and strips one trailing dot ("Example.COM." -> "example.com").
std::string Canonicalise(absl::string_view host) {
  std::string out = absl::AsciiStrToLower(host);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

absl::StatusOr<uint16_t> ParsePort(absl::string_view port, absl::string_view text) {
  int value = 0;
  if (!AllDigits(port) || port.size() > 5 || port[0] == '0' || !absl::SimpleAtoi(port, &value) ||
      value < 1 || value > 65535) {
    return Invalid(text, "the port must be a number from 1 to 65535");
  }
  return static_cast<uint16_t>(value);
}

bool IsSubdomainOf(absl::string_view host, absl::string_view base) {
  return host.size() > base.size() + 1 && absl::EndsWith(host, base) &&
         host[host.size() - base.size() - 1] == '.';
}

}  // namespace

absl::StatusOr<DomainPattern> DomainPattern::Parse(absl::string_view text, ListKind kind) {
  if (text.empty()) return Invalid(text, "it is empty");
  if (absl::Status s = CheckBytes(text, /*allow_pattern_chars=*/true); !s.ok()) return s;

  absl::string_view host_part = text;
  std::optional<uint16_t> port;
  if (size_t colon = text.find(':'); colon != absl::string_view::npos) {
    if (text.find(':', colon + 1) != absl::string_view::npos) {
      return Invalid(text, "IPv6 literals are not supported");
    }
    absl::StatusOr<uint16_t> parsed = ParsePort(text.substr(colon + 1), text);
    if (!parsed.ok()) return parsed.status();
    port = *parsed;
    host_part = text.substr(0, colon);
  }
  std::string host = Canonicalise(host_part);

  if (host == "*") {
    if (kind == ListKind::kAllow) {
      return Invalid(text, "\"*\" (every host) is not allowed in an allow list; list the domains");
    }
    return DomainPattern(Kind::kAny, "", port);
  }
  Kind pattern_kind = Kind::kExact;
  if (absl::StartsWith(host, "*.")) {
    pattern_kind = Kind::kSubdomains;
    host.erase(0, 2);
  }
  if (absl::StrContains(host, '*')) {
    return Invalid(text, "\"*\" is only allowed as the whole first label, as in \"*.example.com\"");
  }
  bool is_ipv4 = false;
  if (absl::Status s = CheckHost(host, text, &is_ipv4); !s.ok()) return s;
  if (pattern_kind == Kind::kSubdomains) {
    if (is_ipv4) return Invalid(text, "a wildcard cannot apply to an IPv4 address");
    if (kind == ListKind::kAllow && !absl::StrContains(host, '.')) {
      return Invalid(text,
                     "a wildcard over a top-level domain is too broad for an allow list; "
                     "name the domain, e.g. \"*.example.com\"");
    }
  } else if (is_ipv4) {
    pattern_kind = Kind::kIpv4;
  }
  return DomainPattern(pattern_kind, std::move(host), port);
}

bool DomainPattern::HostMatches(absl::string_view canonical_host) const {
  switch (kind_) {
    case Kind::kAny:
      return true;
    case Kind::kExact:
    case Kind::kIpv4:
      return canonical_host == host_;
    case Kind::kSubdomains:
      return IsSubdomainOf(canonical_host, host_);
  }
  return false;
}

bool DomainPattern::Matches(absl::string_view host, uint16_t port) const {
  if (port_.has_value() && *port_ != port) return false;
  absl::StatusOr<std::string> canonical = CanonicalHost(host);
  return canonical.ok() && HostMatches(*canonical);
}

bool DomainPattern::Covers(const DomainPattern& other) const {
  if (port_.has_value() && other.port_ != port_) return false;
  switch (kind_) {
    case Kind::kAny:
      return true;
    case Kind::kExact:
    case Kind::kIpv4:
      return other.kind_ == kind_ && other.host_ == host_;
    case Kind::kSubdomains:
      if (other.kind_ == Kind::kAny) return false;
      if (other.kind_ == Kind::kSubdomains) {
        return other.host_ == host_ || IsSubdomainOf(other.host_, host_);
      }
      return IsSubdomainOf(other.host_, host_);
  }
  return false;
}

std::string DomainPattern::ToString() const {
  std::string out;
  switch (kind_) {
    case Kind::kAny:
      out = "*";
      break;
    case Kind::kSubdomains:
      out = absl::StrCat("*.", host_);
      break;
    case Kind::kExact:
    case Kind::kIpv4:
      out = host_;
      break;
  }
  if (port_.has_value()) absl::StrAppend(&out, ":", *port_);
  return out;
}

absl::StatusOr<std::string> CanonicalHost(absl::string_view host) {
  if (host.empty()) return Invalid(host, "it is empty");
  if (absl::Status s = CheckBytes(host, /*allow_pattern_chars=*/false); !s.ok()) return s;
  std::string canonical = Canonicalise(host);
  bool is_ipv4 = false;
  if (absl::Status s = CheckHost(canonical, host, &is_ipv4); !s.ok()) return s;
  return canonical;
}

}  // namespace moat::sandbox
