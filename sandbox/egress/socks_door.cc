// The SOCKS5 door (RFC 1928): greeting (only "no authentication" is accepted), one CONNECT
// request, a reply, then the tunnel. BIND and UDP ASSOCIATE are refused (0x07): UDP would be a
// way around the domain rules.
#include <sys/socket.h>

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "sandbox/egress/doors.h"
#include "sandbox/egress/proxy.h"
#include "sandbox/egress/socket_io.h"
#include "sandbox/egress/socks5.h"
#include "sandbox/egress/target.h"

namespace moat::egress {
namespace {

constexpr absl::Duration kReplyTimeout = absl::Seconds(5);
constexpr size_t kReadChunk = 4096;

bool Send(ProxiedRequest& session, absl::string_view bytes) {
  return SendAll(session.client(), bytes, absl::Now() + kReplyTimeout, session.env().stop_fd).ok();
}

void Reply(ProxiedRequest& session, SocksReply reply) {
  (void)Send(session, SocksReplyMessage(reply, std::nullopt, 0));
}

// Parses one message with `parse` (which returns the bytes used or 0 for "need more"), reading
// as needed. Returns the bytes used, or 0 once the client has gone (recorded).
template <typename Parse>
absl::StatusOr<size_t> ReadMessage(ProxiedRequest& session, std::string* buffer, Parse parse,
                                   absl::string_view what) {
  for (;;) {
    absl::StatusOr<size_t> used = parse(*buffer);
    if (!used.ok() || *used != 0) return used;
    absl::StatusOr<size_t> n = RecvSome(session.client(), buffer, kReadChunk,
                                        session.head_deadline(), session.env().stop_fd);
    if (!n.ok() || *n == 0) {
      session.RecordRefusal(
          absl::IsDeadlineExceeded(n.status()) ? 408 : (n.ok() ? 400 : 503),
          n.ok() ? absl::StrCat("closed in the middle of the SOCKS5 ", what)
                 : absl::StrCat("reading the SOCKS5 ", what, ": ", n.status().message()));
      return 0;
    }
  }
}

const char* CommandName(uint8_t command) {
  switch (command) {
    case 0x02:
      return "BIND";
    case 0x03:
      return "UDP ASSOCIATE";
    default:
      return "unknown";
  }
}

}  // namespace

void ServeSocks(ProxiedRequest& session) {
  session.record().method = "SOCKS5";
  std::string buffer;
  bool no_auth = false;
  absl::StatusOr<size_t> used = ReadMessage(
      session, &buffer, [&](absl::string_view b) { return ParseSocksGreeting(b, &no_auth); },
      "greeting");
  if (!used.ok()) return session.RecordRefusal(400, used.status().message());
  if (*used == 0) return;
  buffer.erase(0, *used);
  if (!no_auth) {
    (void)Send(session,
               std::string{static_cast<char>(kSocksVersion), static_cast<char>(kSocksMethodNone)});
    return session.RecordRefusal(
        400, "the client offered no acceptable SOCKS5 method (only \"no authentication\")");
  }
  if (!Send(session,
            std::string{static_cast<char>(kSocksVersion), static_cast<char>(kSocksMethodNoAuth)})) {
    return session.RecordRefusal(400, "the client went away after its greeting");
  }

  SocksRequest request;
  used = ReadMessage(
      session, &buffer, [&](absl::string_view b) { return ParseSocksRequest(b, &request); },
      "request");
  if (absl::IsUnimplemented(used.status())) {
    Reply(session, SocksReply::kAddressTypeNotSupported);
    return session.RecordRefusal(400, used.status().message());
  }
  if (!used.ok()) {
    Reply(session, SocksReply::kGeneralFailure);
    return session.RecordRefusal(400, used.status().message());
  }
  if (*used == 0) return;
  buffer.erase(0, *used);
  session.record().port = request.port;
  if (request.command != kSocksCommandConnect) {
    Reply(session, SocksReply::kCommandNotSupported);
    session.record().host = absl::CHexEscape(request.host);
    return session.RecordRefusal(
        400, absl::StrFormat("SOCKS5 command 0x%02x (%s) is not supported, only CONNECT",
                             request.command, CommandName(request.command)));
  }
  absl::StatusOr<CanonicalHost> host = CanonicalizeHost(request.host);
  if (!host.ok()) {
    Reply(session, SocksReply::kNotAllowed);
    return session.RecordInvalidHost(request.host, host.status());
  }
  if (request.port == 0) {
    Reply(session, SocksReply::kNotAllowed);
    session.record().host = host->text;
    return session.RecordRefusal(400, "port 0");
  }
  OpenFailure failure;
  if (!session.Open(*host, request.port, &failure)) return Reply(session, failure.socks_reply);

  struct sockaddr_storage bound;
  socklen_t length = sizeof(bound);
  std::optional<IpAddress> bound_address;
  uint16_t bound_port = 0;
  if (::getsockname(session.upstream(), reinterpret_cast<struct sockaddr*>(&bound), &length) == 0) {
    bound_address = IpAddress::FromSockaddr(reinterpret_cast<struct sockaddr*>(&bound));
    bound_port = ntohs(bound.ss_family == AF_INET
                           ? reinterpret_cast<struct sockaddr_in*>(&bound)->sin_port
                           : reinterpret_cast<struct sockaddr_in6*>(&bound)->sin6_port);
  }
  if (!Send(session, SocksReplyMessage(SocksReply::kSucceeded, bound_address, bound_port))) return;
  const ProxyConfig& config = *session.env().config;
  if (buffer.size() > config.max_request_body_bytes) return;
  if (!session.ForwardEarlyBytes(buffer)) return;
  RelayOptions options;
  options.idle_timeout = config.idle_timeout;
  options.upload_limit = config.max_request_body_bytes - buffer.size();
  session.Relay(options);
}

}  // namespace moat::egress
