// The HTTP door: one request per connection.
//
//   read head (64 KiB, request_timeout) -> parse (400/431)
//     CONNECT host:port  -> checks, dial -> "200 Connection established" -> tunnel
//     METHOD http://...  -> Host must agree -> checks -> body buffered (413) -> dial
//                        -> origin-form request with Connection: close -> response relayed
//     anything else      -> 400
//
// Errors are answered with a short text/plain body naming the reason, then a lingering close:
// the proxy stops writing and reads (discarding) what the client still sends for a moment, so
// the client's unsent body does not turn into a reset that destroys the answer before it is read.
#include <sys/socket.h>

#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sandbox/egress/doors.h"
#include "sandbox/egress/http_message.h"
#include "sandbox/egress/proxy.h"
#include "sandbox/egress/socket_io.h"
#include "sandbox/egress/target.h"

namespace moat::egress {
namespace {

constexpr absl::Duration kReplyTimeout = absl::Seconds(5);
constexpr absl::Duration kLingerTime = absl::Seconds(2);
constexpr size_t kReadChunk = 64 << 10;

void LingeringClose(ProxiedRequest& session) {
  ::shutdown(session.client(), SHUT_WR);
  const absl::Time deadline = absl::Now() + kLingerTime;
  std::string discard;
  for (;;) {
    discard.clear();
    absl::StatusOr<size_t> n =
        RecvSome(session.client(), &discard, kReadChunk, deadline, session.env().stop_fd);
    if (!n.ok() || *n == 0) return;
  }
}

// Answers the client with `status` and `reason` and closes politely. The record is the
// caller's business.
void Reply(ProxiedRequest& session, int status, absl::string_view reason) {
  const std::string body = absl::StrCat("moat egress proxy: ", reason, "\n");
  const std::string response =
      absl::StrCat("HTTP/1.1 ", status, " ", HttpReasonPhrase(status),
                   "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ", body.size(),
                   "\r\nConnection: close\r\n\r\n", body);
  (void)SendAll(session.client(), response, absl::Now() + kReplyTimeout, session.env().stop_fd);
  LingeringClose(session);
}

// Records a refusal and answers it.
void Refuse(ProxiedRequest& session, int status, absl::string_view reason) {
  session.RecordRefusal(status, reason);
  Reply(session, status, reason);
}

// The request was allowed but the origin failed it: the record stays allowed.
void UpstreamFailed(ProxiedRequest& session, int status, absl::string_view reason) {
  session.record().status = status;
  absl::StrAppend(&session.record().reason, "; ", reason);
  Reply(session, status, reason);
}

void RefuseInvalidHost(ProxiedRequest& session, absl::string_view raw, const absl::Status& why) {
  session.RecordInvalidHost(raw, why);
  Reply(session, 400, why.message());
}

// The Host header value sent upstream: the canonical host, bracketed when IPv6, with the port
// unless it is 80.
std::string HostHeader(const HostPort& target) {
  std::string host = target.host.literal && !target.host.literal->is_v4()
                         ? absl::StrCat("[", target.host.text, "]")
                         : target.host.text;
  if (target.port != 80) absl::StrAppend(&host, ":", target.port);
  return host;
}

// Reads the request head into `buffer`; its length, or 0 after refusing the request.
size_t ReadHead(ProxiedRequest& session, std::string* buffer) {
  for (;;) {
    if (const size_t length = HttpHeadLength(*buffer); length != 0) {
      if (length > kMaxHttpHeadBytes) break;
      return length;
    }
    if (buffer->size() >= kMaxHttpHeadBytes) break;
    absl::StatusOr<size_t> n = RecvSome(session.client(), buffer, kMaxHttpHeadBytes,
                                        session.head_deadline(), session.env().stop_fd);
    if (absl::IsDeadlineExceeded(n.status())) {
      Refuse(session, 408, "no complete request head in time");
      return 0;
    }
    if (!n.ok() || *n == 0) {
      // Nothing to answer: the client is gone (or the proxy is stopping).
      session.RecordRefusal(n.ok() ? 400 : 503,
                            n.ok() ? (buffer->empty() ? "closed without sending a request"
                                                      : "closed in the middle of the request head")
                                   : std::string(n.status().message()));
      return 0;
    }
  }
  Refuse(session, 431, "request head over 64 KiB");
  return 0;
}

void ServeConnect(ProxiedRequest& session, const HttpRequestHead& head, absl::string_view early) {
  session.record().protocol = "connect";
  absl::StatusOr<HostPort> target = ParseAuthority(head.target, /*default_port=*/0);
  if (!target.ok()) return RefuseInvalidHost(session, head.target, target.status());
  OpenFailure failure;
  if (!session.Open(target->host, target->port, &failure)) {
    return Reply(session, failure.http_status, failure.reason);
  }
  const absl::Status sent = SendAll(session.client(), "HTTP/1.1 200 Connection established\r\n\r\n",
                                    absl::Now() + kReplyTimeout, session.env().stop_fd);
  if (!sent.ok()) return;
  const ProxyConfig& config = *session.env().config;
  if (early.size() > config.max_request_body_bytes) {
    session.record().reason += "; relay ended: upload over the cap";
    return;
  }
  if (!session.ForwardEarlyBytes(early)) return;
  RelayOptions options;
  options.idle_timeout = config.idle_timeout;
  options.upload_limit = config.max_request_body_bytes - early.size();
  session.Relay(options);
}

// Reads the body as `framing` says into `body`, starting with what came with the head. False
// after refusing the request.
bool ReadBody(ProxiedRequest& session, const BodyFraming& framing, std::string early,
              std::string* body) {
  const ProxyConfig& config = *session.env().config;
  const uint64_t cap = config.max_request_body_bytes;
  auto too_large = [&] {
    Refuse(session, 413,
           absl::StrCat("request body over network.maxRequestBodyBytes (", cap, " bytes)"));
    return false;
  };
  auto read_more = [&](std::string* into) -> bool {
    absl::StatusOr<size_t> n =
        RecvSome(session.client(), into, kReadChunk, absl::Now() + config.request_timeout,
                 session.env().stop_fd);
    if (absl::IsDeadlineExceeded(n.status())) {
      Refuse(session, 408, "the request body stalled");
      return false;
    }
    if (!n.ok() || *n == 0) {
      session.RecordRefusal(n.ok() ? 400 : 503, n.ok() ? "closed in the middle of the request body"
                                                       : std::string(n.status().message()));
      return false;
    }
    return true;
  };
  if (framing.kind == BodyFraming::Kind::kNone) return true;
  if (framing.kind == BodyFraming::Kind::kLength && framing.length > cap) return too_large();
  if (framing.expect_continue && early.empty()) {
    // The client waits for this before sending the body; the proxy buffers it, so it answers
    // itself (Expect is not passed on).
    if (!SendAll(session.client(), "HTTP/1.1 100 Continue\r\n\r\n", absl::Now() + kReplyTimeout,
                 session.env().stop_fd)
             .ok()) {
      return false;
    }
  }
  if (framing.kind == BodyFraming::Kind::kLength) {
    *body = std::move(early);
    // Bytes past the body would be a second, pipelined request: not served, dropped.
    if (body->size() > framing.length) body->resize(framing.length);
    while (body->size() < framing.length) {
      if (!read_more(body)) return false;
      if (body->size() > framing.length) body->resize(framing.length);
    }
    return true;
  }
  ChunkedDecoder decoder;
  std::string input = std::move(early);
  for (;;) {
    absl::StatusOr<size_t> used = decoder.Feed(input, body);
    if (!used.ok()) {
      Refuse(session, 400, absl::StrCat("malformed chunked body: ", used.status().message()));
      return false;
    }
    if (body->size() > cap) return too_large();
    if (decoder.done()) return true;
    input.clear();
    if (!read_more(&input)) return false;
  }
}

void ServeForward(ProxiedRequest& session, const HttpRequestHead& head, std::string early) {
  session.record().protocol = "http";
  if (absl::StartsWith(head.target, "/") || head.target == "*") {
    return Refuse(session, 400,
                  "a request for the proxy itself; send requests to other hosts in absolute form "
                  "(GET http://host/path) or tunnel with CONNECT");
  }
  absl::StatusOr<AbsoluteForm> form = ParseAbsoluteForm(head.target);
  if (!form.ok()) return Refuse(session, 400, form.status().message());
  absl::StatusOr<HostPort> target = ParseAuthority(form->authority, 80);
  if (!target.ok()) return RefuseInvalidHost(session, form->authority, target.status());
  session.record().host = target->host.text;
  session.record().port = target->port;
  // The origin sees the Host header, the proxy checks the target: they must name one place.
  const std::vector<absl::string_view> hosts = head.Values("Host");
  if (hosts.size() > 1) return Refuse(session, 400, "more than one Host header");
  if (hosts.size() == 1) {
    absl::StatusOr<HostPort> host = ParseAuthority(hosts[0], 80);
    if (!host.ok()) {
      return Refuse(session, 400, absl::StrCat("Host header: ", host.status().message()));
    }
    if (host->host.text != target->host.text || host->port != target->port) {
      return Refuse(session, 400,
                    absl::StrCat("the Host header (", host->host.text, ":", host->port,
                                 ") does not match the request target (", target->host.text, ":",
                                 target->port, ")"));
    }
  }
  absl::StatusOr<BodyFraming> framing = RequestBodyFraming(head);
  if (!framing.ok()) {
    return Refuse(session, absl::IsFailedPrecondition(framing.status()) ? 417 : 400,
                  framing.status().message());
  }
  OpenFailure failure;
  if (!session.Admit(target->host, target->port, &failure)) {
    return Reply(session, failure.http_status, failure.reason);
  }
  std::string body;
  if (!ReadBody(session, *framing, std::move(early), &body)) return;
  session.up_hash().Update(body);
  if (!session.Connect(&failure)) return Reply(session, failure.http_status, failure.reason);

  const ProxyConfig& config = *session.env().config;
  const int stop_fd = session.env().stop_fd;
  std::optional<uint64_t> length;
  if (framing->kind != BodyFraming::Kind::kNone) length = body.size();
  const std::string request =
      absl::StrCat(BuildOriginRequestHead(head, form->path, HostHeader(*target), length), body);
  if (absl::Status sent =
          SendAll(session.upstream(), request, absl::Now() + config.idle_timeout, stop_fd);
      !sent.ok()) {
    return UpstreamFailed(session, 502, absl::StrCat("sending the request: ", sent.message()));
  }
  session.record().bytes_up += body.size();

  std::string response;
  size_t head_length = 0;
  while ((head_length = HttpHeadLength(response)) == 0 && response.size() < kMaxHttpHeadBytes) {
    absl::StatusOr<size_t> n = RecvSome(session.upstream(), &response, kReadChunk,
                                        absl::Now() + config.idle_timeout, stop_fd);
    if (!n.ok()) {
      return UpstreamFailed(session, 504,
                            absl::StrCat("waiting for the origin: ", n.status().message()));
    }
    if (*n == 0) break;
  }
  absl::StatusOr<HttpResponseHead> rewritten =
      head_length == 0 ? absl::InvalidArgumentError("no complete response head")
                       : RewriteResponseHead(absl::string_view(response).substr(0, head_length));
  if (!rewritten.ok()) {
    return UpstreamFailed(session, 502,
                          absl::StrCat("the origin's response: ", rewritten.status().message()));
  }
  session.record().status = rewritten->status;
  const std::string first =
      absl::StrCat(rewritten->rewritten, absl::string_view(response).substr(head_length));
  if (!SendAll(session.client(), first, absl::Now() + config.idle_timeout, stop_fd).ok()) return;
  session.record().bytes_down += first.size();
  RelayOptions options;
  options.idle_timeout = config.idle_timeout;
  options.upload = false;
  session.Relay(options);
}

}  // namespace

const char* HttpReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

void ServeHttp(ProxiedRequest& session) {
  std::string buffer;
  const size_t head_length = ReadHead(session, &buffer);
  if (head_length == 0) return;
  absl::StatusOr<HttpRequestHead> head =
      ParseHttpRequestHead(absl::string_view(buffer).substr(0, head_length));
  if (!head.ok()) return Refuse(session, 400, head.status().message());
  session.record().method = head->method;
  std::string early = buffer.substr(head_length);
  if (head->method == "CONNECT") return ServeConnect(session, *head, early);
  ServeForward(session, *head, std::move(early));
}

}  // namespace moat::egress
