// IP addresses as the egress proxy sees them: parsed from text or sockaddrs, classified (loopback,
// private, link-local, metadata, ...) and matched against network.allowedCidrs.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::egress {

class IpAddress {
 public:
  static IpAddress V4(uint32_t host_order);
  static IpAddress V6(const std::array<uint8_t, 16>& bytes);
  // Strict text forms only: a dotted quad without leading zeros ("10.0.0.1") or RFC 4291 IPv6
  // text without brackets or zone ("::1", "fd00:ec2::254", "::ffff:1.2.3.4"). Client-supplied
  // spellings such as "127.1" or "0x7f.0.0.1" go through CanonicalizeHost (target.h) instead.
  static std::optional<IpAddress> Parse(absl::string_view text);
  // AF_INET or AF_INET6; nullopt for anything else.
  static std::optional<IpAddress> FromSockaddr(const struct sockaddr* addr);

  bool is_v4() const { return v4_; }
  uint32_t v4() const { return v4_value_; }                  // host byte order; only when is_v4()
  const std::array<uint8_t, 16>& v6() const { return v6_; }  // only when !is_v4()

  // The IPv4 address an IPv6 address stands for when it embeds one (IPv4-mapped ::ffff:a.b.c.d,
  // IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d); otherwise the address itself. Checks are
  // made on the unmapped form, so "::ffff:127.0.0.1" counts as loopback.
  IpAddress Unmapped() const;

  std::string ToString() const;  // "10.0.0.1", "fd00::1"
  // Fills `out` for connect()/bind(); returns the length to pass.
  socklen_t ToSockaddr(uint16_t port, struct sockaddr_storage* out) const;

  friend bool operator==(const IpAddress&, const IpAddress&) = default;
  friend std::strong_ordering operator<=>(const IpAddress&, const IpAddress&) = default;

 private:
  bool v4_ = true;
  uint32_t v4_value_ = 0;
  std::array<uint8_t, 16> v6_{};
};

// An address range, "10.0.0.0/8", "fd00::/8", or a single address ("192.0.2.7" = /32).
class Cidr {
 public:
  // Refuses host bits set below the prefix ("10.0.0.1/8"), prefixes out of range, and anything
  // IpAddress::Parse refuses. The message says what is wrong with `text`.
  static absl::StatusOr<Cidr> Parse(absl::string_view text);

  // IPv4 ranges also contain the IPv4-mapped forms of their addresses (checks use Unmapped()).
  bool Contains(const IpAddress& address) const;
  std::string ToString() const;  // normalised, e.g. "10.0.0.0/8"
  const IpAddress& base() const { return base_; }
  int prefix_length() const { return prefix_; }

  friend bool operator==(const Cidr&, const Cidr&) = default;

 private:
  Cidr(IpAddress base, int prefix) : base_(base), prefix_(prefix) {}
  IpAddress base_;
  int prefix_ = 0;
};

// Why `address` is not a public unicast destination ("loopback", "private (10.0.0.0/8)",
// "link-local", "cloud metadata", "multicast", "unspecified", "carrier-grade NAT", "reserved",
// ...), or nullopt when it is one. Looks at address.Unmapped().
std::optional<std::string> SpecialPurpose(const IpAddress& address);

// Which resolved addresses the proxy may dial: public unicast addresses that are not the host's
// own, plus whatever network.allowedCidrs covers (which can open loopback or private ranges on
// purpose, e.g. for a package mirror on the LAN or a test server).
class AddressPolicy {
 public:
  AddressPolicy(std::vector<Cidr> allowed, std::vector<IpAddress> host_addresses)
      : allowed_(std::move(allowed)), host_addresses_(std::move(host_addresses)) {}

  // OK, or PermissionDenied whose message is the reason, e.g.
  // `address 169.254.169.254 is cloud metadata` or `address 192.168.1.4 is one of this host's`.
  absl::Status Check(const IpAddress& address) const;

 private:
  std::vector<Cidr> allowed_;
  std::vector<IpAddress> host_addresses_;
};

// The addresses of every interface of the calling thread's network namespace (getifaddrs).
absl::StatusOr<std::vector<IpAddress>> HostAddresses();

}  // namespace moat::egress
