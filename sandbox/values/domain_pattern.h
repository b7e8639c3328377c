// Domain patterns for network.allowedDomains / deniedDomains. The policy validates them when a
// file is read; the egress proxy uses Matches() on every request, so both agree on one syntax.
//
// Syntax (after lower-casing and stripping one trailing dot from the host):
//   example.com          that host only
//   *.example.com        subdomains of example.com only (not example.com itself)
//   192.0.2.1            an IPv4 literal, dotted quad, no leading zeros
//   *                    any host; deny lists only
//   any of the above followed by :PORT (1-65535) to restrict the entry to that port
// Labels are 1-63 letters, digits or hyphens, not starting or ending with a hyphen; the host is at
// most 253 characters. Everything else (NUL, control bytes, spaces, "%", "/", "@", "_", "*"
// elsewhere, empty labels, IPv6, non-ASCII) is refused: the proxy will compare these strings with
// names that sandboxed code chose, so any ambiguity is a way around the list.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::sandbox {

class DomainPattern {
 public:
  // Which list the pattern is for: allow lists refuse "*" and wildcards over a single label
  // ("*.com"), which would open a whole top-level domain.
  enum class ListKind { kAllow, kDeny };

  static absl::StatusOr<DomainPattern> Parse(absl::string_view text,
                                             ListKind kind = ListKind::kAllow);

  // Whether a request to `host`:`port` is covered. `host` is canonicalised the same way (case,
  // one trailing dot); a host that is not a valid name or IPv4 literal never matches, so callers
  // must reject such hosts before consulting allow and deny lists.
  bool Matches(absl::string_view host, uint16_t port) const;

  // Whether every host:port this pattern's `other` matches is also matched by this one. Used to
  // check that a project policy only narrows the allow list.
  bool Covers(const DomainPattern& other) const;

  // The normalised text, e.g. "*.example.com:443"; Parse(ToString()) gives an equal pattern.
  std::string ToString() const;

  // The host part without "*." ("example.com" for "*.example.com"; empty for "*").
  const std::string& host() const { return host_; }
  bool is_wildcard() const { return kind_ == Kind::kSubdomains; }
  bool is_any() const { return kind_ == Kind::kAny; }
  bool is_ipv4() const { return kind_ == Kind::kIpv4; }
  std::optional<uint16_t> port() const { return port_; }

  friend bool operator==(const DomainPattern& a, const DomainPattern& b) {
    return a.kind_ == b.kind_ && a.host_ == b.host_ && a.port_ == b.port_;
  }

 private:
  enum class Kind { kExact, kIpv4, kSubdomains, kAny };

  DomainPattern(Kind kind, std::string host, std::optional<uint16_t> port)
      : kind_(kind), host_(std::move(host)), port_(port) {}

  bool HostMatches(absl::string_view canonical_host) const;

  Kind kind_;
  std::string host_;
  std::optional<uint16_t> port_;
};

// The canonical form of a host name a client asked for: lower-cased, one trailing dot removed,
// and checked against the same label rules as patterns (no wildcard). IPv4 literals must be
// dotted quads without leading zeros; other numeric forms ("2130706433", "0x7f.1") are refused
// because resolvers disagree about them.
absl::StatusOr<std::string> CanonicalHost(absl::string_view host);

}  // namespace moat::sandbox
