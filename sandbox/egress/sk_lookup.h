// Transparent mode on every port: a BPF sk_lookup program attached to the sandbox's network
// namespace hands each TCP connection to an address in a given range (the addresses the DNS stub
// gives out for allowed names) to one listening socket of the supervisor, whatever the port. The
// accepted socket's local address and port are still the ones the client dialled, so the proxy
// knows the name (from the address) and the port. Needs Linux 5.9 and CAP_BPF/CAP_NET_ADMIN
// (root).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "util/unique_fd.h"

namespace moat::egress {

class SkLookupSteering {
 public:
  // Steers TCP/IPv4 connections to (address & mask) == prefix (host byte order values) in the
  // network namespace `netns_fd` to `listener` (a listening TCP socket of that namespace). The
  // steering lasts as long as the returned object.
  static absl::StatusOr<SkLookupSteering> Attach(int netns_fd, int listener, uint32_t prefix,
                                                 uint32_t mask);

 private:
  SkLookupSteering(UniqueFd map, UniqueFd prog, UniqueFd link)
      : map_(std::move(map)), prog_(std::move(prog)), link_(std::move(link)) {}
  UniqueFd map_, prog_, link_;
};

}  // namespace moat::egress
