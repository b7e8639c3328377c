// The transparent door: the DNS stub answered an allowed name with this listener's address, so
// whatever connects here means that name, at the port it connected to. There is no protocol to
// answer in: a refusal is a closed connection (and an audit record).
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "sandbox/egress/doors.h"
#include "sandbox/egress/proxy.h"
#include "sandbox/egress/target.h"
#include "util/errno_status.h"

namespace moat::egress {

void ServeTransparent(ProxiedRequest& session, const std::string& name) {
  session.record().method = "TCP";
  struct sockaddr_storage local;
  socklen_t length = sizeof(local);
  if (::getsockname(session.client(), reinterpret_cast<struct sockaddr*>(&local), &length) != 0) {
    return session.RecordRefusal(400,
                                 ErrnoStatus("getsockname of a transparent connection").message());
  }
  const uint16_t port =
      ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<struct sockaddr_in6*>(&local)->sin6_port
                                        : reinterpret_cast<struct sockaddr_in*>(&local)->sin_port);
  session.record().port = port;
  absl::StatusOr<CanonicalHost> host = CanonicalizeHost(name);
  if (!host.ok()) return session.RecordInvalidHost(name, host.status());
  OpenFailure failure;
  if (!session.Open(*host, port, &failure)) return;
  const ProxyConfig& config = *session.env().config;
  RelayOptions options;
  options.idle_timeout = config.idle_timeout;
  options.upload_limit = config.max_request_body_bytes;
  session.Relay(options);
}

}  // namespace moat::egress
