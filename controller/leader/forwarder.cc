#include "controller/leader/forwarder.h"

#include <httplib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

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
    return Unavailable(res, absl::StrCat("the leadership is changing (", options_.self,
                                         " was sent this request as the leader and is not); "
                                         "retry in a few seconds"));
  }
  absl::StatusOr<std::optional<std::string>> leader = options_.leader();
  if (!leader.ok()) {
    return Unavailable(res, absl::StrCat("writes are unavailable: this replica cannot reach etcd "
                                         "to find the leader (",
                                         leader.status().message(), ")"));
  }
  if (!leader->has_value() || **leader == options_.self) {
    return Unavailable(res,
                       "no controller replica leads right now (an election is under way, or etcd "
                       "has lost its quorum); writes are refused until one does: retry in a few "
                       "seconds");
  }
  httplib::Client client(**leader);
  if (!options_.ca_file.empty()) client.set_ca_cert_path(options_.ca_file.c_str());
  int64_t us = absl::ToInt64Microseconds(options_.timeout);
  client.set_read_timeout(us / 1'000'000, us % 1'000'000);
  client.set_connection_timeout(2, 0);
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
  httplib::Result answer = client.send(out);
  if (!answer) {
    return Unavailable(res, absl::StrCat("the leader ", **leader, " did not answer (",
                                         httplib::to_string(answer.error()),
                                         "); if it died, another replica leads within the lease "
                                         "TTL: retry"));
  }
  res.status = answer->status;
  for (const auto& [name, value] : answer->headers) {
    if (Copied(name)) res.set_header(name.c_str(), value);
  }
  res.set_content(answer->body, answer->get_header_value("Content-Type").c_str());
}

}  // namespace moat::controller
