// The per-sandbox egress proxy, run by the supervisor outside the sandbox on listening sockets
// that live in the sandbox's network namespace (so there is no bridge process and nothing of ours
// inside). Three doors, one set of checks:
//   - HTTP proxy: CONNECT tunnels and plain HTTP forwarding (absolute-form targets; the Host
//     header must agree with the target);
//   - SOCKS5: CONNECT only, no authentication;
//   - transparent: connections to a local address the DNS stub handed out for an allowed name.
// For each request: canonicalise the host (target.h), apply the domain rules (rules.h), the rate
// limit (429) and body cap (413), resolve once, check every address (AddressPolicy), dial exactly
// the checked address, relay, and write one audit record.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sandbox/egress/audit.h"
#include "sandbox/egress/ip_address.h"
#include "sandbox/egress/resolver.h"
#include "sandbox/egress/rules.h"
#include "sandbox/util/unique_fd.h"

namespace moat::egress {

struct ProxyConfig {
  std::string sandbox_id;
  uint64_t max_request_body_bytes = 16ull << 20;  // plain HTTP: 413; tunnels: closed at the cap
  uint32_t requests_per_minute = 600;             // over it: 429 (SOCKS5: "not allowed")
  size_t max_connections = 128;                   // concurrent client connections
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Minutes(5);  // a relay with no traffic either way
};

class EgressProxy {
 public:
  // `resolver` and `audit` must outlive the proxy.
  EgressProxy(ProxyConfig config, EgressRules rules, AddressPolicy addresses, Resolver* resolver,
              AuditSink* audit);
  ~EgressProxy();  // Stop()

  // Listening sockets (bound and listening, non-blocking or not). May be called before or after
  // Start(), from any thread.
  void AddHttpListener(UniqueFd listener);
  void AddSocksListener(UniqueFd listener);
  // Transparent mode: every connection accepted on `listener` is for `name` (the allowed name
  // the DNS stub answered with this listener's local address) at the listener's port.
  void AddTransparentListener(UniqueFd listener, std::string name);

  absl::Status Start();
  // Closes the listeners and every open connection and joins all threads. Idempotent.
  void Stop();
};

}  // namespace moat::egress
