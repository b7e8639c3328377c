// Blocking-style I/O over non-blocking sockets for the proxy's connection threads: every wait is
// a poll() that also watches the proxy's stop eventfd, so Stop() wakes a thread wherever it is
// waiting (reading a head, dialling, writing a reply) and every wait has a deadline.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sandbox/values/ip_address.h"
#include "util/unique_fd.h"

namespace moat::egress {

// Waits until `fd` has one of `events` (or an error or hang-up). DeadlineExceeded at `deadline`,
// Cancelled when `stop_fd` becomes readable.
absl::Status WaitFor(int fd, short events, absl::Time deadline, int stop_fd);

// Appends what arrives (at most `max` bytes) to `buffer`; returns the count, 0 at end of stream.
absl::StatusOr<size_t> RecvSome(int fd, std::string* buffer, size_t max, absl::Time deadline,
                                int stop_fd);

// Sends all of `data` (MSG_NOSIGNAL: a closed peer is an error, not a SIGPIPE).
absl::Status SendAll(int fd, absl::string_view data, absl::Time deadline, int stop_fd);

struct Dialed {
  UniqueFd fd;          // connected, non-blocking, TCP_NODELAY; invalid on failure
  int error = 0;        // on failure: the errno (ETIMEDOUT after `timeout`, ECANCELED when stopped)
  std::string message;  // on failure: "connect to 192.0.2.1:443: Connection refused"
};

// Connects to exactly `address`:`port` (never a name: the address is the one that was checked).
Dialed Dial(const IpAddress& address, uint16_t port, absl::Duration timeout, int stop_fd);

// "192.0.2.1:80", "[2001:db8::1]:443".
std::string AddressPortText(const IpAddress& address, uint16_t port);

}  // namespace moat::egress
