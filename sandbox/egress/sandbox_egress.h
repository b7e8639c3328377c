// One sandbox's egress, from policy to teardown: the proxy (HTTP CONNECT and forwarding, SOCKS5,
// transparent), the DNS stub, the audit log, and the denials that become the run's violations.
//
//   Create()   before clone: rules, resolvers, address checks, audit log; any error here means
//              the command never runs (fail closed)
//   Env(), ResolvConf()   what the command sees: proxy variables, a resolv.conf naming the stub
//   Attach()   after clone, before the command starts: binds the listeners on the sandbox's own
//              127.0.0.1 (ports below) from outside its namespace and starts serving
//   AttachListeners()   instead, rootless (EgressOptions::rootless): the same listeners, made by
//              the sandbox's init in its own namespace before any of the command's code runs
//              and handed over (contain.h's ChildSocket), checked, then served the same way
//   Finish()   stops everything and returns the denials
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sandbox/egress/audit.h"
#include "sandbox/egress/dns_stub.h"
#include "sandbox/egress/proxy.h"
#include "sandbox/egress/rate_limiter.h"
#include "sandbox/egress/resolver.h"
#include "sandbox/egress/rules.h"
#include "sandbox/egress/sk_lookup.h"
#include "sandbox/output/result.h"
#include "sandbox/values/dns_server.h"
#include "sandbox/values/domain_pattern.h"
#include "sandbox/values/ip_address.h"
#include "util/unique_fd.h"

namespace moat::egress {

inline constexpr uint16_t kHttpProxyPort = 3128;
inline constexpr uint16_t kSocksPort = 1080;
inline constexpr uint16_t kDnsPort = 53;
// Where the audit log goes unless the caller says otherwise. /var/lib/moat is root-only (0700)
// and hidden from every sandbox.
inline constexpr char kStateDir[] = "/var/lib/moat";
inline constexpr char kDefaultAuditLog[] = "/var/lib/moat/egress-audit.jsonl";
// Where root's sandboxes' resolv.conf is written (a user's: $XDG_RUNTIME_DIR/moat, rootless.h).
// Sandboxes never see the host's /run.
inline constexpr char kRuntimeDir[] = "/run/moat";

// One listener of a session, on the sandbox's 127.0.0.1.
struct ListenerSpec {
  int type;  // SOCK_STREAM (listening) or SOCK_DGRAM
  uint16_t port;
  const char* label;  // "127.0.0.1:3128 (tcp)"
};

struct EgressOptions {
  std::string sandbox_id;
  std::vector<sandbox::DomainPattern> allowed_domains, denied_domains;
  std::vector<Cidr> allowed_cidrs;
  std::vector<DnsServer> dns_servers;  // empty: the host's resolv.conf
  uint64_t max_request_body_bytes = 16ull << 20;
  uint64_t requests_per_minute = 600;
  bool transparent = false;
  std::string audit_log = kDefaultAuditLog;
  std::string runtime_dir = kRuntimeDir;  // where ResolvConf() writes
  // The supervisor may not enter the sandbox's network namespace (an ordinary user's run, whose
  // sandbox owns its namespaces; or RunnerOptions::rootless_forms as root): the listeners come
  // from the sandbox (AttachListeners, never Attach), and network.transparent is refused at
  // Create(), since its steering (sk_lookup) needs CAP_BPF on the host and its per-name
  // listeners are made in the namespace after the command has started.
  bool rootless = false;
  size_t max_violations = 64;
  // Told of every request as it is decided (from the proxy's threads): whether it was allowed,
  // and the audit line's gist. For a daemon's metrics and events; must not block.
  std::function<void(bool allowed, const std::string& detail)> observer;
};

class EgressSession {
 public:
  static absl::StatusOr<std::unique_ptr<EgressSession>> Create(const EgressOptions& options);
  ~EgressSession();  // Finish()

  // HTTP_PROXY, HTTPS_PROXY, ALL_PROXY (and lower case) pointing at the proxy; NO_PROXY for
  // localhost.
  std::vector<std::pair<std::string, std::string>> Env() const;

  // A host file, `dir`/resolv.conf, that says "nameserver 127.0.0.1", for /etc/resolv.conf
  // inside (under /run or $XDG_RUNTIME_DIR, which sandboxes never see); `dir` is made if missing.
  // Written once, atomically, and shared by every sandbox of its owner: the content never varies.
  static absl::StatusOr<std::string> ResolvConf(const std::string& dir = kRuntimeDir);

  // The listeners, in the order Attach() makes them and AttachListeners() takes them: the HTTP
  // proxy, SOCKS5, the DNS stub's UDP and TCP sockets.
  static const std::vector<ListenerSpec>& Listeners();

  // Binds the listeners inside the namespace of `pidfd` and starts the proxy and the DNS stub.
  // Refused for a rootless session.
  absl::Status Attach(int pidfd);

  // Rootless: serves `listeners`, made in the sandbox's namespace by its init (Listeners()'
  // order). Each is checked first (family, type, bound address and port, listening): a
  // descriptor that is anything else is refused and nothing is served.
  absl::Status AttachListeners(std::vector<UniqueFd> listeners);

  // Waits, at most `timeout`, until the proxy serves no connection: every request decided so far
  // has then reached the observer. Returns whether it is idle.
  bool AwaitIdle(absl::Duration timeout);

  // Stops serving (closing every connection) and returns the denials as `network` violations,
  // at most max_violations of them. Idempotent.
  std::vector<sandbox::Violation> Finish();

 private:
  class Recorder;
  explicit EgressSession(const EgressOptions& options);
  StubAnswer Answer(const DnsQuestion& question);
  // Starts serving the listeners (Listeners()' order).
  absl::Status Serve(std::vector<UniqueFd> listeners);
  // Transparent mode: the local address standing for `name`, with its listeners made on first use.
  absl::StatusOr<IpAddress> TransparentAddress(const CanonicalHost& host);
  // Steers every port of the transparent range to one listener of the proxy, if BPF allows.
  absl::Status SteerTransparentAddresses();

  EgressOptions options_;
  std::unique_ptr<EgressRules> rules_;
  std::unique_ptr<AddressPolicy> addresses_;
  std::unique_ptr<Resolver> resolver_;
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<RateLimiter> dns_limiter_;  // DNS questions per minute
  std::unique_ptr<EgressProxy> proxy_;
  int pidfd_ = -1;
  UniqueFd stop_;  // eventfd: readable = the DNS stub returns
  std::thread dns_thread_;
  bool finished_ = false;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, IpAddress> transparent_ ABSL_GUARDED_BY(mu_);
  std::map<IpAddress, std::string> transparent_names_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SkLookupSteering> steering_;
  uint32_t next_transparent_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace moat::egress
