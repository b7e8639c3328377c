// Sockets that live in a sandbox's network namespace but belong to the supervisor. A socket stays
// in the namespace it was created in, whoever holds it later: a thread joins the sandbox's
// namespace just long enough to create and bind it, and the supervisor then serves the sandbox's
// own loopback from outside, with no bridge process and nothing of ours inside.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/values/ip_address.h"
#include "util/unique_fd.h"

namespace moat::egress {

// Runs `fn` on a short-lived thread that has joined the network namespace of the process behind
// `pidfd` (setns; needs CAP_SYS_ADMIN over that namespace's user namespace, which the root that
// created the sandbox has). The calling thread's namespace never changes.
absl::Status InNetworkNamespace(int pidfd, absl::FunctionRef<absl::Status()> fn);

// A TCP socket bound to address:port and listening; CLOEXEC and non-blocking.
absl::StatusOr<UniqueFd> ListenTcp(const IpAddress& address, uint16_t port);
// A UDP socket bound to address:port; CLOEXEC and non-blocking.
absl::StatusOr<UniqueFd> BindUdp(const IpAddress& address, uint16_t port);

// OK when `fd` is a socket of `address`'s family and of `type` (SOCK_STREAM: listening; or
// SOCK_DGRAM), bound to address:port; else FailedPrecondition saying what it is instead. For
// listeners made by someone else (the sandbox's init, rootless) before they are served.
absl::Status CheckListener(int fd, int type, const IpAddress& address, uint16_t port);

}  // namespace moat::egress
