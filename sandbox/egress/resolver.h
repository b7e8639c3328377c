// How the supervisor resolves names for the sandbox: its own DNS client, talking to
// network.dnsServers (default: the host's /etc/resolv.conf). The proxy resolves once and dials
// exactly the address it checked, so a second, different answer (DNS rebinding) never matters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sandbox/egress/ip_address.h"

namespace moat::egress {

struct DnsServer {
  IpAddress address;
  uint16_t port = 53;
  std::string ToString() const;  // "1.1.1.1:53", "[::1]:53"
  friend bool operator==(const DnsServer&, const DnsServer&) = default;
};

// "192.0.2.53", "127.0.0.1:5353", "::1", "[::1]:5353". The message says what is wrong.
absl::StatusOr<DnsServer> ParseDnsServer(absl::string_view text);

// The `nameserver` lines of a resolv.conf text, in order (malformed lines are skipped, as the
// C library does).
std::vector<DnsServer> ParseResolvConf(absl::string_view text);

// The servers of the host's /etc/resolv.conf; an error naming the file if it has none.
absl::StatusOr<std::vector<DnsServer>> HostDnsServers();

// Thread-safe.
class Resolver {
 public:
  virtual ~Resolver() = default;
  // The A and AAAA addresses of `name` (canonical, see target.h). NotFound for NXDOMAIN or no
  // address records, Unavailable when no server answered, with a message naming the servers.
  virtual absl::StatusOr<std::vector<IpAddress>> Resolve(absl::string_view name) = 0;
};

struct DnsResolverOptions {
  absl::Duration timeout = absl::Seconds(2);  // per attempt
  int attempts = 2;                           // rounds over the server list
};

// UDP queries with random ids and source ports, checked against the question on return; TCP when
// a response is truncated.
class DnsResolver : public Resolver {
 public:
  static absl::StatusOr<std::unique_ptr<DnsResolver>> Create(std::vector<DnsServer> servers,
                                                             DnsResolverOptions options = {});
  absl::StatusOr<std::vector<IpAddress>> Resolve(absl::string_view name) override;

 private:
  DnsResolver(std::vector<DnsServer> servers, DnsResolverOptions options)
      : servers_(std::move(servers)), options_(options) {}
  std::vector<DnsServer> servers_;
  DnsResolverOptions options_;
};

}  // namespace moat::egress
