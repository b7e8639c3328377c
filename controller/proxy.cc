#include "controller/proxy.h"

#include <httplib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/leader/stream_pipe.h"
#include "controller/lifecycle_json.h"
#include "util/http/client.h"
#include "util/http/reply.h"

namespace moat::controller {
namespace {

// Headers that describe one hop, or carry the caller's credentials: never forwarded.
bool DropRequestHeader(absl::string_view name) {
  for (absl::string_view h : {"host", "connection", "keep-alive", "transfer-encoding", "te",
                              "upgrade", "content-length", "open-sandbox-api-key", "authorization",
                              "x-execd-access-token", "proxy-authorization", "accept-encoding"}) {
    if (absl::EqualsIgnoreCase(name, h)) return true;
  }
  return false;
}
bool DropResponseHeader(absl::string_view name) {
  for (absl::string_view h :
       {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}) {
    if (absl::EqualsIgnoreCase(name, h)) return true;
  }
  return false;
}

using http::SendError;

// httplib parses a multipart body into req.files and keeps no raw body: the parts are written
// out again, in their order, under a fresh boundary.
std::string MultipartBody(const httplib::Request& req, const std::string& boundary) {
  std::string body;
  for (const auto& [name, part] : req.files) {
    absl::StrAppend(&body, "--", boundary, "\r\nContent-Disposition: form-data; name=\"", part.name,
                    "\"");
    if (!part.filename.empty()) absl::StrAppend(&body, "; filename=\"", part.filename, "\"");
    absl::StrAppend(&body, "\r\n");
    if (!part.content_type.empty()) {
      absl::StrAppend(&body, "Content-Type: ", part.content_type, "\r\n");
    }
    absl::StrAppend(&body, "\r\n", part.content, "\r\n");
  }
  absl::StrAppend(&body, "--", boundary, "--\r\n");
  return body;
}

}  // namespace

void ProxyToSandbox(const httplib::Request& req, httplib::Response& res, const Sandbox& sandbox,
                    const AgentEndpoint& agent, int port, const std::string& rest,
                    ControllerMetrics* metrics, http::ClientPool* pool) {
  if (port == kEgressPort) {
    if (req.method == "GET" && (rest == "/policy" || rest.empty())) {
      res.status = 200;
      res.set_content(R"({"status":"ok","mode":"profile","enforcementMode":"moat","policy":null})",
                      "application/json");
      return;
    }
    return SendError(res, 501,
                     "moat sets a sandbox's egress from its agent profile; the egress API "
                     "answers only GET /policy");
  }
  if (port != kExecdPort) {
    return SendError(res, 404,
                     absl::StrCat("moat proxies port ", kExecdPort, " (execd) and ", kEgressPort,
                                  " (egress policy) only"));
  }
  httplib::Request out;
  out.method = req.method;
  out.path = absl::StrCat("/v1/sandboxes/", sandbox.agent_id, "/execd", rest);
  std::string query;
  for (const auto& [k, v] : req.params) {
    absl::StrAppend(&query, query.empty() ? "?" : "&", httplib::detail::encode_query_param(k), "=",
                    httplib::detail::encode_query_param(v));
  }
  out.path += query;
  for (const auto& [k, v] : req.headers) {
    if (!DropRequestHeader(k)) out.headers.emplace(k, v);
  }
  out.headers.emplace("X-EXECD-ACCESS-TOKEN", sandbox.agent_token);
  if (req.is_multipart_form_data()) {
    std::string boundary = absl::StrCat("moat-proxy-", sandbox.id);
    for (auto it = out.headers.begin(); it != out.headers.end();) {
      it = absl::EqualsIgnoreCase(it->first, "Content-Type") ? out.headers.erase(it) : ++it;
    }
    out.headers.emplace("Content-Type", "multipart/form-data; boundary=" + boundary);
    out.body = MultipartBody(req, boundary);
  } else {
    out.body = req.body;
  }
  std::shared_ptr<RelayUpstream> up = RelayUpstream::Start(
      // A command may stream for as long as it runs.
      {.url = agent.url,
       .ca_file = agent.ca_file,
       .connection_timeout = absl::Seconds(5),
       .read_timeout = absl::Hours(1),
       .pool = pool},
      std::move(out), [&](httplib::Error error) {
        SendError(res, 502,
                  absl::StrCat("the sandbox's agent did not answer: ",
                               http::DescribeFailure(error, "nodes.tls.ca"), "; try again"));
      });
  if (!up) return;
  const httplib::Response& head = up->head();
  res.status = head.status;
  std::string content_type = "application/octet-stream";
  for (const auto& [k, v] : head.headers) {
    if (absl::EqualsIgnoreCase(k, "Content-Type")) {
      content_type = v;
    } else if (!DropResponseHeader(k)) {
      res.set_header(k, v);
    }
  }
  RelayUpstream::Stream(up, res, content_type,
                        [metrics](size_t n) { metrics->AddProxiedBytes(n); });
}

}  // namespace moat::controller
