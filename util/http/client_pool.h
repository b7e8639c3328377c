// Kept-alive connections to the peers a daemon calls often (the controller to its agents): a
// call takes an idle httplib client for its peer, or makes one, and gives it back once answered,
// so a call costs no TCP connect (nor TLS handshake, nor a new thread on the peer's side).
//
// cpp-httplib serialises the requests of one client object, so the pool hands each client to
// one caller at a time. httplib itself notices a connection the peer closed (a restart, its
// keep-alive timeout) before it writes, and connects again; what it cannot see is a close that
// races the write. A call on a reused connection that failed before anything could have reached
// the peer (connect or write failed) is made once more on a fresh connection; a call that may
// have reached it (no answer read) is not: a create is never sent twice.
#pragma once

#include <httplib.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace moat::http {

// Where a call goes: a base URL ("http://127.0.0.1:7070", https://...) and the CA that verifies
// an https one (TrustCa; empty: the system's CAs).
struct Peer {
  std::string url;
  std::string ca_file;
  bool operator<(const Peer& other) const {
    return std::tie(url, ca_file) < std::tie(other.url, other.ca_file);
  }
};

// Whether a call that failed with `error` cannot have reached the peer: it never connected (or
// timed out connecting), or the request could not be written out (the peer reads a request
// whole before it acts on it). The pool's retry and the leader forwarder's both go by it.
bool NeverReachedPeer(httplib::Error error);

class ClientPool {
 public:
  struct Options {
    // Idle connections kept per peer; more callers at once get connections of their own, closed
    // after use. 0: none kept (a connection per call).
    size_t max_idle_per_peer = 4;
    // An idle connection older than this is closed rather than reused: under cpp-httplib's
    // server keep-alive timeout (5 s), so the peer rarely closes one as it is being written.
    absl::Duration max_idle = absl::Seconds(3);
  };
  ClientPool() : ClientPool(Options()) {}
  explicit ClientPool(Options options) : options_(options) {}

  // Runs `call` on a connection to `peer` (its result's answer, or the error), then keeps the
  // connection for the next call if it answered. `call` sets the timeouts it needs: the client
  // may carry the last caller's. A call on a reused connection is made again on a fresh one if
  // it failed before reaching the peer (NeverReachedPeer).
  httplib::Result Call(const Peer& peer,
                       const std::function<httplib::Result(httplib::Client&)>& call)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Idle connections now, over all peers.
  size_t Idle() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct IdleClient {
    std::unique_ptr<httplib::Client> client;
    absl::Time since;
  };
  // An idle client for `peer` (reused: true), or a new one (false).
  std::unique_ptr<httplib::Client> Take(const Peer& peer, bool* reused) ABSL_LOCKS_EXCLUDED(mu_);
  void Give(const Peer& peer, std::unique_ptr<httplib::Client> client) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  // Most recently given back last: reused first, so the oldest age out.
  std::map<Peer, std::vector<IdleClient>> idle_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// An httplib::Result for what Client::send(req, res, error) returned, for a Call whose request
// is a full httplib::Request (a streamed answer).
httplib::Result SendResult(httplib::Client& client, httplib::Request& request);

}  // namespace moat::http
