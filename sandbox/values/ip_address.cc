#include "sandbox/values/ip_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "util/errno_status.h"
#include "util/units.h"

namespace moat::egress {
namespace {

using Bytes = std::array<uint8_t, 16>;

// The IPv4 address in the last four bytes of an IPv6 address.
uint32_t LowV4(const Bytes& b) {
  return (uint32_t{b[12]} << 24) | (uint32_t{b[13]} << 16) | (uint32_t{b[14]} << 8) | b[15];
}

bool AllZero(const Bytes& b, size_t from, size_t to) {
  return std::all_of(b.begin() + from, b.begin() + to, [](uint8_t x) { return x == 0; });
}

// ::ffff:a.b.c.d (RFC 4291 2.5.5.2): an AF_INET6 socket dialling it reaches a.b.c.d.
bool IsV4Mapped(const Bytes& b) { return AllZero(b, 0, 10) && b[10] == 0xff && b[11] == 0xff; }

// Whether the first `prefix` bits of `a` and `b` agree.
bool SamePrefix(const Bytes& a, const Bytes& b, int prefix) {
  int full = prefix / 8;
  if (!std::equal(a.begin(), a.begin() + full, b.begin())) return false;
  int rest = prefix % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[full] & mask) == (b[full] & mask);
}

uint32_t V4Mask(int prefix) { return prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix); }

// `address` with every bit after the first `prefix` cleared.
IpAddress Network(const IpAddress& address, int prefix) {
  if (address.is_v4()) return IpAddress::V4(address.v4() & V4Mask(prefix));
  Bytes bytes = address.v6();
  for (int bit = prefix; bit < 128; ++bit) bytes[bit / 8] &= ~(0x80 >> (bit % 8));
  return IpAddress::V6(bytes);
}

// "0" or a decimal number without a leading zero, at most `max`.
std::optional<int> ParseSmallDecimal(absl::string_view text, int max) {
  if (text.empty() || text.size() > 3 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

std::optional<uint32_t> ParseDottedQuad(absl::string_view text) {
  uint32_t value = 0;
  int parts = 0;
  while (true) {
    size_t dot = text.find('.');
    std::optional<int> part = ParseSmallDecimal(text.substr(0, dot), 255);
    if (!part.has_value()) return std::nullopt;
    value = (value << 8) | static_cast<uint32_t>(*part);
    ++parts;
    if (dot == absl::string_view::npos) break;
    text.remove_prefix(dot + 1);
  }
  if (parts != 4) return std::nullopt;
  return value;
}

absl::Status InvalidCidr(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid address range ", QuoteForMessage(text), ": ", why));
}

struct SpecialRange {
  Cidr range;
  std::string reason;
};

// Ranges that are not public unicast destinations (IANA special-purpose registries, RFC 6890 and
// successors). First match wins: the cloud metadata addresses sit inside link-local and private
// ranges, so they come first and the reason names them.
const std::vector<SpecialRange>& SpecialRanges() {
  static const std::vector<SpecialRange>* const ranges = [] {
    struct Entry {
      const char* cidr;
      const char* reason;
    };
    static constexpr Entry kEntries[] = {
        {"169.254.169.254", "cloud metadata"},  // AWS, GCP, Azure, OpenStack, ...
        {"100.100.100.200", "cloud metadata"},  // Alibaba Cloud
        {"168.63.129.16", "cloud metadata"},    // Azure wire server
        {"fd00:ec2::254", "cloud metadata"},    // AWS IMDS over IPv6
        {"0.0.0.0/8", "unspecified (0.0.0.0/8, \"this network\")"},
        {"10.0.0.0/8", "private (10.0.0.0/8)"},
        {"100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10)"},
        {"127.0.0.0/8", "loopback (127.0.0.0/8)"},
        {"169.254.0.0/16", "link-local (169.254.0.0/16)"},
        {"172.16.0.0/12", "private (172.16.0.0/12)"},
        {"192.0.0.0/24", "reserved (192.0.0.0/24, IETF protocol assignments)"},
        {"192.0.2.0/24", "documentation (192.0.2.0/24)"},
        {"192.88.99.0/24", "reserved (192.88.99.0/24, deprecated 6to4 relays)"},
        {"192.168.0.0/16", "private (192.168.0.0/16)"},
        {"198.18.0.0/15", "benchmarking (198.18.0.0/15)"},
        {"198.51.100.0/24", "documentation (198.51.100.0/24)"},
        {"203.0.113.0/24", "documentation (203.0.113.0/24)"},
        {"224.0.0.0/4", "multicast (224.0.0.0/4)"},
        {"255.255.255.255", "broadcast"},  // before 240.0.0.0/4, which holds it
        {"240.0.0.0/4", "reserved (240.0.0.0/4)"},
        {"::", "unspecified"},
        {"::1", "loopback"},
        {"100::/64", "discard-only (100::/64)"},
        {"2001:db8::/32", "documentation (2001:db8::/32)"},
        {"3fff::/20", "documentation (3fff::/20)"},
        {"fc00::/7", "private (fc00::/7, unique-local)"},
        {"fe80::/10", "link-local (fe80::/10)"},
        {"fec0::/10", "site-local (fec0::/10)"},
        {"ff00::/8", "multicast (ff00::/8)"},
    };
    auto* out = new std::vector<SpecialRange>;
    for (const Entry& e : kEntries) {
      // Constant input: a parse failure is a bug in this table, caught by any test.
      out->push_back({Cidr::Parse(e.cidr).value(), e.reason});
    }
    return out;
  }();
  return *ranges;
}

}  // namespace

IpAddress IpAddress::V4(uint32_t host_order) {
  IpAddress a;
  a.v4_ = true;
  a.v4_value_ = host_order;
  return a;
}

IpAddress IpAddress::V6(const std::array<uint8_t, 16>& bytes) {
  IpAddress a;
  a.v4_ = false;
  a.v6_ = bytes;
  return a;
}

std::optional<IpAddress> IpAddress::Parse(absl::string_view text) {
  if (text.find(':') == absl::string_view::npos) {
    std::optional<uint32_t> v4 = ParseDottedQuad(text);
    if (!v4.has_value()) return std::nullopt;
    return V4(*v4);
  }
  // inet_pton takes a C string: refuse anything it would read differently (an embedded NUL), and
  // the zone ids and brackets it would refuse anyway, before copying.
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
      return std::nullopt;
    }
  }
  std::string copy(text);
  Bytes bytes;
  if (inet_pton(AF_INET6, copy.c_str(), bytes.data()) != 1) return std::nullopt;
  return V6(bytes);
}

std::optional<IpAddress> IpAddress::FromSockaddr(const struct sockaddr* addr) {
  if (addr == nullptr) return std::nullopt;
  if (addr->sa_family == AF_INET) {
    struct sockaddr_in in;
    std::memcpy(&in, addr, sizeof(in));
    return V4(ntohl(in.sin_addr.s_addr));
  }
  if (addr->sa_family == AF_INET6) {
    struct sockaddr_in6 in6;
    std::memcpy(&in6, addr, sizeof(in6));
    Bytes bytes;
    std::memcpy(bytes.data(), &in6.sin6_addr, bytes.size());
    return V6(bytes);
  }
  return std::nullopt;
}

IpAddress IpAddress::Unmapped() const {
  if (v4_) return *this;
  if (IsV4Mapped(v6_)) return V4(LowV4(v6_));
  // ::a.b.c.d (IPv4-compatible, deprecated), except :: and ::1, which are IPv6's own.
  if (AllZero(v6_, 0, 12) && LowV4(v6_) > 1) return V4(LowV4(v6_));
  // 64:ff9b::a.b.c.d (NAT64 well-known prefix, RFC 6052): a translator dials a.b.c.d.
  static constexpr uint8_t kNat64[4] = {0x00, 0x64, 0xff, 0x9b};
  if (std::equal(kNat64, kNat64 + 4, v6_.begin()) && AllZero(v6_, 4, 12)) {
    return V4(LowV4(v6_));
  }
  return *this;
}

std::string IpAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN];
  if (v4_) {
    uint32_t net = htonl(v4_value_);
    inet_ntop(AF_INET, &net, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET6, v6_.data(), buf, sizeof(buf));
  }
  return buf;
}

socklen_t IpAddress::ToSockaddr(uint16_t port, struct sockaddr_storage* out) const {
  std::memset(out, 0, sizeof(*out));
  if (v4_) {
    struct sockaddr_in in {};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    in.sin_addr.s_addr = htonl(v4_value_);
    std::memcpy(out, &in, sizeof(in));
    return sizeof(in);
  }
  struct sockaddr_in6 in6 {};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(port);
  std::memcpy(&in6.sin6_addr, v6_.data(), v6_.size());
  std::memcpy(out, &in6, sizeof(in6));
  return sizeof(in6);
}

absl::StatusOr<Cidr> Cidr::Parse(absl::string_view text) {
  size_t slash = text.find('/');
  absl::string_view address_text = text.substr(0, slash);
  std::optional<IpAddress> base = IpAddress::Parse(address_text);
  if (!base.has_value()) {
    return InvalidCidr(text,
                       "not an IPv4 address (dotted quad without leading zeros, e.g. "
                       "\"10.0.0.0/8\") or IPv6 address (e.g. \"fd00::/8\")");
  }
  int max = base->is_v4() ? 32 : 128;
  int prefix = max;
  if (slash != absl::string_view::npos) {
    std::optional<int> parsed = ParseSmallDecimal(text.substr(slash + 1), max);
    if (!parsed.has_value()) {
      return InvalidCidr(text, absl::StrCat("the prefix length must be a number from 0 to ", max));
    }
    prefix = *parsed;
  }
  // An IPv4-mapped range is an IPv4 range: Contains() judges addresses by their IPv4 form.
  if (!base->is_v4() && prefix >= 96 && IsV4Mapped(base->v6())) {
    base = base->Unmapped();
    prefix -= 96;
  }
  IpAddress network = Network(*base, prefix);
  if (network != *base) {
    return InvalidCidr(text,
                       absl::StrCat("bits are set after the /", prefix, " prefix; did you mean \"",
                                    network.ToString(), "/", prefix, "\"?"));
  }
  return Cidr(*base, prefix);
}

bool Cidr::Contains(const IpAddress& address) const {
  // Addresses that embed an IPv4 address are judged as that address only, so an IPv6 range such
  // as "::/0" never covers "::ffff:127.0.0.1" by accident.
  IpAddress a = address.Unmapped();
  if (a.is_v4() != base_.is_v4()) return false;
  if (a.is_v4()) return (a.v4() & V4Mask(prefix_)) == base_.v4();
  return SamePrefix(a.v6(), base_.v6(), prefix_);
}

std::string Cidr::ToString() const { return absl::StrCat(base_.ToString(), "/", prefix_); }

std::optional<std::string> SpecialPurpose(const IpAddress& address) {
  IpAddress a = address.Unmapped();
  for (const SpecialRange& special : SpecialRanges()) {
    if (special.range.Contains(a)) return special.reason;
  }
  // Only 2000::/3 is allocated as global unicast (RFC 4291 2.4); everything else that the table
  // does not name (64:ff9b:1::/48, the rest of ::/8, ...) is not a public destination.
  if (!a.is_v4() && (a.v6()[0] & 0xe0) != 0x20) return "reserved (outside 2000::/3)";
  return std::nullopt;
}

absl::Status AddressPolicy::Check(const IpAddress& address) const {
  for (const Cidr& cidr : allowed_) {
    if (cidr.Contains(address)) return absl::OkStatus();
  }
  IpAddress unmapped = address.Unmapped();
  std::string shown = address.ToString();
  if (unmapped != address) absl::StrAppend(&shown, " (", unmapped.ToString(), ")");
  // The address's class first: "loopback" says more than "one of this host's".
  if (std::optional<std::string> reason = SpecialPurpose(address); reason.has_value()) {
    return absl::PermissionDeniedError(absl::StrCat("address ", shown, " is ", *reason));
  }
  for (const IpAddress& own : host_addresses_) {
    if (own.Unmapped() == unmapped) {
      return absl::PermissionDeniedError(absl::StrCat("address ", shown, " is one of this host's"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<IpAddress>> HostAddresses() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return ErrnoStatus("getifaddrs (listing this host's addresses)");
  std::vector<IpAddress> out;
  for (struct ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (std::optional<IpAddress> a = IpAddress::FromSockaddr(it->ifa_addr); a.has_value()) {
      out.push_back(*a);
    }
  }
  freeifaddrs(list);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace moat::egress
