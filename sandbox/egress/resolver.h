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
#include "sandbox/values/dns_server.h"
#include "sandbox/values/ip_address.h"

namespace moat::egress {

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
