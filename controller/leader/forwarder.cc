#include "controller/leader/forwarder.h"

#include <httplib.h>

#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "controller/leader/stream_pipe.h"
#include "nlohmann/json.hpp"
#include "util/http/client_pool.h"

namespace moat::controller {
namespace {

void Unavailable(httplib::Response& res, absl::string_view message) {
  res.status = 503;
  res.set_header("Retry-After", "2");
  res.set_content(nlohmann::json{{"code", "NO_LEADER"}, {"message", message}}.dump(),
                  "application/json");
}

// Hop-by-hop headers and those httplib computes itself are not copied.
bool Copied(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  return lower != "host" && lower != "content-length" && lower != "connection" &&
         lower != "transfer-encoding" && lower != "keep-alive" && lower != "content-type" &&
         lower != "remote_addr" && lower != "remote_port" && lower != "local_addr" &&
         lower != "local_port" && lower != "x-request-id";
}

}  // namespace

bool FollowerServes(absl::string_view method, absl::string_view path) {
  if (method != "GET" && method != "HEAD") return false;
  absl::string_view p = path;
  absl::ConsumePrefix(&p, "/v1");
  if (p == "/health" || path == "/metrics") return true;
  return (p == "/sandboxes" || absl::StartsWith(p, "/sandboxes/")) &&
         !absl::StrContains(p, "/proxy/");
}

void LeaderForwarder::Forward(const httplib::Request& req, httplib::Response& res) const {
  if (req.has_header(kForwardedHeader)) {
    res.set_header(kNotLeaderHeader, options_.self);
    return Unavailable(res, absl::StrCat("the leadership is changing (", options_.self,
                                         " was sent this request as the leader and is not); "
                                         "retry in a few seconds"));
  }
  httplib::Request out;
  out.method = req.method;
  out.path = req.target.empty() ? req.path : req.target;  // With the query string.
  for (const auto& [name, value] : req.headers) {
    if (Copied(name)) out.headers.emplace(name, value);
  }
  out.headers.emplace(kForwardedHeader, options_.self);
  if (req.has_header("X-Request-ID")) {
    out.headers.emplace("X-Request-ID", req.get_header_value("X-Request-ID"));
  }
  if (!req.body.empty() || req.has_header("Content-Type")) {
    out.headers.emplace("Content-Type", req.get_header_value("Content-Type"));
    out.body = req.body;
  }
  // The leader's answer is relayed as it arrives (a command's server-sent events through the
  // proxy): its head first, then its body chunk by chunk.
  std::shared_ptr<RelayUpstream> up;
  std::optional<std::string> refused;
  for (int attempt = 0; !up; ++attempt) {
    absl::StatusOr<std::optional<std::string>> leader = options_.leader(refused);
    if (!leader.ok()) {
      return Unavailable(res, absl::StrCat("writes are unavailable: this replica cannot reach "
                                           "etcd to find the leader (",
                                           leader.status().message(), ")"));
    }
    if (!leader->has_value() || **leader == options_.self) {
      return Unavailable(res,
                         "no controller replica leads right now (an election is under way, or "
                         "etcd has lost its quorum); writes are refused until one does: retry in "
                         "a few seconds");
    }
    const std::string url = **leader;
    httplib::Error error = httplib::Error::Success;
    up = RelayUpstream::Start(
        {.url = url, .ca_file = options_.ca_file, .read_timeout = options_.timeout},
        attempt == 0 ? httplib::Request(out) : httplib::Request(std::move(out)),
        [&](httplib::Error e) { error = e; });
    // Once more, to the leader etcd names now, only where nothing reached a leader: the request
    // never got there (nobody listened: the old leader died), or the replica there refused as
    // not leading.
    const bool not_sent = !up && http::NeverReachedPeer(error);
    const bool not_leader =
        up && up->head().status == 503 && up->head().has_header(kNotLeaderHeader);
    if (attempt == 0 && (not_sent || not_leader)) {
      refused = url;
      up = nullptr;
      continue;
    }
    if (!up) {
      return Unavailable(
          res, absl::StrCat("the leader ", url, " did not answer (", httplib::to_string(error),
                            "); if it died, another replica leads within the "
                            "lease TTL: retry"));
    }
  }
  const httplib::Response& head = up->head();
  res.status = head.status;
  for (const auto& [name, value] : head.headers) {
    if (Copied(name)) res.set_header(name.c_str(), value);
  }
  const std::string content_type = head.get_header_value("Content-Type");
  // A sized answer (JSON, a file) is relayed whole, with its length; a stream (chunked, or
  // server-sent events) chunk by chunk, as the leader sends it.
  const bool stream = absl::StartsWith(content_type, "text/event-stream") ||
                      (!head.has_header("Content-Length") && head.status != 204 &&
                       head.status != 304 && req.method != "HEAD");
  if (!stream) return res.set_content(up->Sized(), content_type.c_str());
  RelayUpstream::Stream(up, res, content_type.empty() ? "application/octet-stream" : content_type);
}

}  // namespace moat::controller
