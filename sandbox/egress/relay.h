// The byte pump between a sandboxed client and the destination once a request has been allowed.
// Downloads (destination -> client) move through a pipe with splice(2), so the bytes never enter
// user space; uploads go through a buffer because the audit log hashes them and the body cap
// counts them. One thread, non-blocking sockets, poll() only when neither direction can move.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "sandbox/egress/sha256.h"

namespace moat::egress {

struct RelayOptions {
  absl::Duration idle_timeout = absl::Minutes(5);  // no byte either way for this long: end
  bool upload = true;         // false: only destination -> client (after a plain HTTP request)
  uint64_t upload_limit = 0;  // client -> destination bytes allowed; 0 = no limit
};

struct RelayResult {
  uint64_t bytes_up = 0;    // client -> destination, delivered
  uint64_t bytes_down = 0;  // destination -> client, delivered
  // Empty when both directions ended with an orderly close; otherwise why the relay stopped
  // ("idle for 5m", "upload over 1048576 bytes", "stopped", an I/O error).
  std::string error;
};

// Relays between two connected non-blocking sockets until both directions have ended (an end of
// stream is passed on as shutdown(SHUT_WR)), an error, the idle timeout, or `stop_fd` becoming
// readable. `up_hash` sees every byte read from the client. Neither socket is closed here.
RelayResult Relay(int client, int upstream, Sha256* up_hash, const RelayOptions& options,
                  int stop_fd);

}  // namespace moat::egress
