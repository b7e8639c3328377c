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
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sandbox/egress/audit.h"
#include "sandbox/egress/destination_check.h"
#include "sandbox/egress/proxied_request.h"
#include "sandbox/egress/rate_limiter.h"
#include "sandbox/egress/resolver.h"
#include "sandbox/egress/rules.h"
#include "sandbox/values/ip_address.h"
#include "util/unique_fd.h"

namespace moat::egress {

struct ProxyConfig {
  std::string sandbox_id;
  uint64_t max_request_body_bytes = 16ull << 20;  // plain HTTP: 413; tunnels: closed at the cap
  uint32_t requests_per_minute = 600;  // over it: 429 (SOCKS5: "not allowed"); 0: no limit
  size_t max_connections = 128;        // concurrent client connections
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Minutes(5);  // a relay with no traffic either way
  // For the client's request: the HTTP head and body (between reads), the SOCKS5 negotiation.
  absl::Duration request_timeout = absl::Seconds(30);
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
  // Transparent mode on every port (sk_lookup.h): a listener added with an empty name serves
  // connections for the name `name_of` gives the local address the client dialled; an empty
  // result refuses the connection. Call before Start().
  void SetTransparentNames(std::function<std::string(const IpAddress&)> name_of);

  absl::Status Start();
  // Closes the listeners and every open connection and joins all threads. Idempotent.
  void Stop();
  // Waits until no connection is being served (each one's audit record is written when its
  // thread ends), at most `timeout`; returns whether none is. Whoever reads the decisions after
  // a command ended (the agent's run results) waits for the denial answered just before.
  bool AwaitIdle(absl::Duration timeout);

 private:
  enum class Door { kHttp, kSocks, kTransparent };
  struct Listener {
    UniqueFd fd;
    Door door;
    std::string name;  // kTransparent: the name its connections are for
  };
  // One client connection and its thread. The descriptors are owned by the thread; they are
  // listed here (under mu_) only so Stop() can shut them down, and are set to -1 before the
  // thread closes them, so Stop() never touches a descriptor number that was reused.
  struct Connection {
    std::thread thread;
    int client_fd = -1;
    int upstream_fd = -1;
    bool finished = false;
  };

  static const char* ProtocolOf(Door door);  // the audit record's `protocol` until parsed
  void AddListener(UniqueFd listener, Door door, std::string name);
  void AcceptLoop();
  void Accept(int listener, Door door, const std::string& name);
  // Too many connections: a one-line refusal in the door's protocol, an audit record, close.
  void RefuseOverLimit(UniqueFd client, Door door, const std::string& name);
  void Serve(uint64_t id, UniqueFd client, Door door, std::string name);
  bool TrackUpstream(uint64_t id, int fd);
  void UntrackUpstream(uint64_t id);
  void FinishConnection(uint64_t id);
  void ReapFinished();
  void Wake();

  // The name a connection to a transparent listener without a name is for ("" if none).
  std::string TransparentName(int client) const;

  std::function<std::string(const IpAddress&)> transparent_names_;  // set before Start()
  const ProxyConfig config_;
  const EgressRules rules_;
  const AddressPolicy addresses_;
  AuditSink* const audit_;
  RateLimiter limiter_;
  const DestinationCheck check_;
  // eventfds. stop_fd_ becomes readable for good when Stop() begins; every wait in every thread
  // polls it. wake_fd_ tells the accept loop to re-read the listeners and join finished threads.
  UniqueFd stop_fd_;
  UniqueFd wake_fd_;
  absl::Status setup_status_;  // creating the eventfds

  absl::Mutex stop_mu_;  // serialises Start() and Stop()
  std::thread accept_thread_ ABSL_GUARDED_BY(stop_mu_);

  absl::Mutex mu_;
  std::vector<Listener> listeners_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  size_t live_ ABSL_GUARDED_BY(mu_) = 0;  // connections whose thread has not finished
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moat::egress
