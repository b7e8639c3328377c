#include "sandbox/egress/proxied_request.h"

#include <cerrno>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sandbox/egress/proxy.h"
#include "sandbox/egress/socket_io.h"

namespace moat::egress {

ProxiedRequest::ProxiedRequest(const ProxiedRequestEnv& env, int client_fd,
                               absl::string_view protocol)
    : env_(env), client_fd_(client_fd), head_deadline_(absl::Now() + env.config->request_timeout) {
  record_.time = absl::Now();
  record_.sandbox = env.config->sandbox_id;
  record_.protocol = std::string(protocol);
}

ProxiedRequest::~ProxiedRequest() {
  if (upstream_.valid()) {
    // Forget the socket before closing it, so Stop() never shuts down a reused descriptor.
    env_.untrack_upstream();
    upstream_.reset();
  }
  record_.body_sha256 = up_hash_.HexPrefix();
  if (record_.status == 0) record_.status = 400;  // ended before any answer: a bad request
  env_.audit->Record(record_);
}

void ProxiedRequest::RecordInvalidHost(absl::string_view raw, const absl::Status& why) {
  record_.host = absl::CHexEscape(raw);
  RecordRefusal(400, why.message());
}

void ProxiedRequest::RecordRefusal(int status, absl::string_view reason) {
  record_.status = status;
  record_.allowed = false;
  record_.reason = std::string(reason);
}

namespace {

// Records a refusal (or, after the policy allowed the request, a failure to connect: the record
// then stays `allowed`, since nothing was denied).
bool Fail(ProxiedRequest& session, OpenFailure* failure, int status, SocksReply reply,
          std::string reason) {
  failure->http_status = status;
  failure->socks_reply = reply;
  failure->reason = std::move(reason);
  if (session.record().allowed) {
    session.record().status = status;
    absl::StrAppend(&session.record().reason, "; ", failure->reason);
  } else {
    session.RecordRefusal(status, failure->reason);
  }
  return false;
}

}  // namespace

bool ProxiedRequest::Admit(const CanonicalHost& host, uint16_t port, OpenFailure* failure) {
  using Outcome = DestinationVerdict::Outcome;
  record_.host = host.text;
  record_.port = port;
  const DestinationVerdict verdict = env_.check->Check(host, port);
  if (verdict.address) record_.address = verdict.address->ToString();
  switch (verdict.outcome) {
    case Outcome::kAllowed:
      break;
    case Outcome::kDenied:
      return Fail(*this, failure, 403, SocksReply::kNotAllowed, verdict.reason);
    case Outcome::kRateLimited:
      return Fail(*this, failure, 429, SocksReply::kNotAllowed, verdict.reason);
    case Outcome::kUnresolvable:
      return Fail(*this, failure, 502, SocksReply::kHostUnreachable, verdict.reason);
  }
  address_ = verdict.address;
  port_ = port;
  record_.allowed = true;
  record_.reason = verdict.reason;
  return true;
}

bool ProxiedRequest::Connect(OpenFailure* failure) {
  Dialed dialed = Dial(*address_, port_, env_.config->connect_timeout, env_.stop_fd);
  if (!dialed.fd.valid()) {
    switch (dialed.error) {
      case ETIMEDOUT:
        return Fail(*this, failure, 504, SocksReply::kHostUnreachable, dialed.message);
      case ECANCELED:
        return Fail(*this, failure, 503, SocksReply::kGeneralFailure, dialed.message);
      case ECONNREFUSED:
        return Fail(*this, failure, 502, SocksReply::kConnectionRefused, dialed.message);
      case ENETUNREACH:
        return Fail(*this, failure, 502, SocksReply::kNetworkUnreachable, dialed.message);
      default:
        return Fail(*this, failure, 502, SocksReply::kHostUnreachable, dialed.message);
    }
  }
  if (!env_.track_upstream(dialed.fd.get())) {
    return Fail(*this, failure, 503, SocksReply::kGeneralFailure, "the proxy is stopping");
  }
  upstream_ = std::move(dialed.fd);
  record_.status = 200;
  return true;
}

bool ProxiedRequest::ForwardEarlyBytes(absl::string_view bytes) {
  if (bytes.empty()) return true;
  up_hash_.Update(bytes);
  const absl::Status sent =
      SendAll(upstream_.get(), bytes, absl::Now() + env_.config->idle_timeout, env_.stop_fd);
  if (!sent.ok()) {
    absl::StrAppend(&record_.reason, "; relay ended: ", sent.message());
    return false;
  }
  record_.bytes_up += bytes.size();
  return true;
}

void ProxiedRequest::Relay(const RelayOptions& options) {
  const RelayResult result =
      egress::Relay(client_fd_, upstream_.get(), &up_hash_, options, env_.stop_fd);
  record_.bytes_up += result.bytes_up;
  record_.bytes_down += result.bytes_down;
  if (!result.error.empty()) absl::StrAppend(&record_.reason, "; relay ended: ", result.error);
}

}  // namespace moat::egress
