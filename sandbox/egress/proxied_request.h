// One proxied request from accept to audit record, shared by the three doors (HTTP, SOCKS5,
// transparent). The door parses its protocol and canonicalises the host; the session runs the
// destination checks, dials exactly the checked address, relays, and on destruction writes the
// request's one audit record, whichever way the request ended.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sandbox/egress/audit.h"
#include "sandbox/egress/destination_check.h"
#include "sandbox/egress/relay.h"
#include "sandbox/egress/sha256.h"
#include "sandbox/egress/socks5.h"
#include "sandbox/egress/target.h"
#include "util/unique_fd.h"

namespace moat::egress {

struct ProxyConfig;

// What a session needs from the proxy that runs it.
struct ProxiedRequestEnv {
  const ProxyConfig* config;
  const DestinationCheck* check;
  AuditSink* audit;
  int stop_fd;  // readable once the proxy is stopping
  // Register / forget the session's upstream socket so Stop() can shut it down. Track returns
  // false when the proxy is already stopping (the session then gives up).
  std::function<bool(int fd)> track_upstream;
  std::function<void()> untrack_upstream;
};

// Why Open() failed, for each protocol's way of saying so.
struct OpenFailure {
  int http_status = 0;  // 400, 403, 429, 502, 503, 504
  SocksReply socks_reply = SocksReply::kGeneralFailure;
  std::string reason;
};

class ProxiedRequest {
 public:
  ProxiedRequest(const ProxiedRequestEnv& env, int client_fd, absl::string_view protocol);
  ~ProxiedRequest();  // writes the audit record
  ProxiedRequest(const ProxiedRequest&) = delete;
  ProxiedRequest& operator=(const ProxiedRequest&) = delete;

  const ProxiedRequestEnv& env() const { return env_; }
  int client() const { return client_fd_; }
  int upstream() const { return upstream_.get(); }
  AuditRecord& record() { return record_; }
  Sha256& up_hash() { return up_hash_; }

  // The client's host could not be canonicalised (or the request was malformed before a host
  // was known): records `raw` escaped as the host, with `status` and `reason`.
  void RecordInvalidHost(absl::string_view raw, const absl::Status& why);
  void RecordRefusal(int status, absl::string_view reason);

  // Runs the destination checks on host:port. On success the record holds the address to dial
  // and the rule that allowed it. On failure the record holds the refusal.
  bool Admit(const CanonicalHost& host, uint16_t port, OpenFailure* failure);
  // Connects to the one address Admit() accepted. On success the upstream socket is open
  // (upstream()) and the status is provisionally 200.
  bool Connect(OpenFailure* failure);
  bool Open(const CanonicalHost& host, uint16_t port, OpenFailure* failure) {
    return Admit(host, port, failure) && Connect(failure);
  }

  // Sends bytes the client sent ahead of the go-ahead (a TLS ClientHello right behind CONNECT)
  // upstream, hashing and counting them like relayed bytes. False on a write error.
  bool ForwardEarlyBytes(absl::string_view bytes);

  // Relays until both sides are done (relay.h), counting into the record.
  void Relay(const RelayOptions& options);

  // The deadline for reading the client's request.
  absl::Time head_deadline() const { return head_deadline_; }

 private:
  const ProxiedRequestEnv& env_;
  const int client_fd_;
  const absl::Time head_deadline_;
  std::optional<IpAddress> address_;  // what Admit() accepted
  uint16_t port_ = 0;
  UniqueFd upstream_;
  AuditRecord record_;
  Sha256 up_hash_;
};

}  // namespace moat::egress
