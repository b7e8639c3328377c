#include "node-agent/api/http_api.h"

#include <httplib.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "node-agent/api/api_json.h"
#include "node-agent/api/execd_api.h"
#include "node-agent/api/http_connection.h"
#include "util/http/reply.h"
#include "util/log.h"
#include "util/shell_command.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::agent {
namespace {

// The per-sandbox API lives under this suffix of a sandbox's path.
constexpr char kSandboxPrefix[] = "/v1/sandboxes/";
constexpr char kExecdInfix[] = "/execd/";

using http::SendError;
using http::SendJson;
using http::SendStatus;

// The id in the path, or a 400 if it is not one we could have made (it is never used to build
// a path or name, but an early, clear answer beats a confusing 404).
bool PathId(const httplib::Request& req, httplib::Response& res, std::string* id) {
  *id = req.matches[1].str();
  if (!IsValidSandboxId(*id)) {
    SendError(res, 400,
              "invalid sandbox id: ids are \"sb-\" and lower-case letters, digits or dashes");
    return false;
  }
  return true;
}

// A header name or value with a control byte: a 400, never a value cut short. On the plain
// server the raw head was checked as it was read (http_connection.h); the parsed headers are
// checked too, for the TLS server, where httplib's own loop reads the head.
bool HeadersWellFormed(const httplib::Request& req, httplib::Response& res) {
  bool bad = ConnectionServer::CurrentRequestMalformed();
  for (const auto& [name, value] : req.headers) {
    for (absl::string_view text : {absl::string_view(name), absl::string_view(value)}) {
      for (char ch : text) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if ((c < 0x20 && c != '\t') || c == 0x7f) bad = true;
      }
    }
  }
  if (!bad) return true;
  res.set_header("Connection", "close");
  SendError(res, 400,
            "a header of the request holds a NUL or other control byte; header names and "
            "values are visible text, spaces and tabs only");
  return false;
}

// For /v1/sandboxes/{id}/execd/...: the {id}; empty for every other path.
absl::string_view ExecdSandboxId(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, kSandboxPrefix)) return {};
  size_t slash = path.find('/');
  if (slash == absl::string_view::npos) return {};
  if (!absl::StartsWith(path.substr(slash), kExecdInfix)) return {};
  return path.substr(0, slash);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Create(SandboxService* service,
                                                         HttpApiOptions options) {
  if (options.node_token.size() < 16) {
    return absl::InvalidArgumentError("the node token must be at least 16 bytes");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<httplib::Server> server,
                   http::MakeServer(options.tls ? options.tls->cert_file : "",
                                    options.tls ? options.tls->key_file : "",
                                    [] { return std::make_unique<ConnectionServer>(); }));
  std::unique_ptr<HttpApi> api(new HttpApi(service, std::move(options), std::move(server)));
  api->Routes();
  return api;
}

HttpApi::HttpApi(SandboxService* service, HttpApiOptions options,
                 std::unique_ptr<httplib::Server> server)
    : service_(service), options_(std::move(options)), server_(std::move(server)) {}

HttpApi::~HttpApi() { Stop(); }

bool HttpApi::Authorized(const httplib::Request& req, httplib::Response& res) const {
  absl::string_view sandbox_id = ExecdSandboxId(req.path);
  std::string bearer(BearerToken(req.get_header_value("Authorization")));
  if (!sandbox_id.empty()) {
    std::string token = req.get_header_value("X-EXECD-ACCESS-TOKEN");
    if (token.empty()) token = bearer;
    if (!token.empty() && service_->TokenMatches(sandbox_id, token)) return true;
    SendError(res, 401,
              "missing or wrong sandbox token: send the token from the create response in "
              "X-EXECD-ACCESS-TOKEN");
    return false;
  }
  if (!bearer.empty() && ConstantTimeEquals(bearer, options_.node_token)) return true;
  res.set_header("WWW-Authenticate", "Bearer");
  SendError(res, 401, "missing or wrong bearer token: send Authorization: Bearer <node token>");
  return false;
}

// Multipart framing and metadata parts on top of an upload's file bytes.
constexpr uint64_t kUploadFramingBytes = 1 << 20;

bool HttpApi::WithinBodyLimit(const httplib::Request& req, httplib::Response& res) const {
  bool upload = options_.execd != nullptr && ExecdApi::IsUpload(req);
  uint64_t limit = upload ? options_.execd->options().max_upload_bytes + kUploadFramingBytes
                          : options_.max_request_bytes;
  // httplib's own cap is the largest of the two, so a chunked body (no length to check here)
  // could pass it; only uploads may be chunked.
  if (!upload && absl::StrContains(req.get_header_value("Transfer-Encoding"), "chunked") &&
      limit < server_payload_limit_) {
    res.set_header("Connection", "close");
    SendError(res, 411, "send the body with a Content-Length, not chunked");
    return false;
  }
  uint64_t length = 0;
  if (!absl::SimpleAtoi(req.get_header_value("Content-Length"), &length) || length <= limit) {
    return true;
  }
  res.set_header("Connection", "close");
  SendError(res, 413,
            upload ? absl::StrCat("the upload is larger than ", limit - kUploadFramingBytes,
                                  " bytes (the agent's upload limit); send less per request")
                   : absl::StrCat("the request body is larger than ", limit,
                                  " bytes (the agent's api.max_request_bytes); send less"));
  return false;
}

void HttpApi::Routes() {
  httplib::Server& s = *server_;
  server_payload_limit_ = options_.max_request_bytes;
  if (options_.execd != nullptr) {
    server_payload_limit_ = std::max<uint64_t>(
        server_payload_limit_, options_.execd->options().max_upload_bytes + kUploadFramingBytes);
  }
  s.set_payload_max_length(server_payload_limit_);
  // The controller keeps its connections to the agent open (util/http/client_pool.h): httplib's
  // default (5 requests) would close one every fifth call.
  s.set_keep_alive_max_count(1000);
  http::ConfigureServer(
      s, {.daemon = "agent",
          .api_doc = "api/node-agent.yaml",
          .max_request_bytes = options_.max_request_bytes,
          .messages = {{416, "bad Range header; give one range: bytes=first-last"}}});
  if (options_.execd != nullptr) {
    s.new_task_queue = [n = options_.execd->options().http_threads] {
      return new httplib::ThreadPool(n);
    };
  }
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return HeadersWellFormed(req, res) && Authorized(req, res) && WithinBodyLimit(req, res)
               ? httplib::Server::HandlerResponse::Unhandled
               : httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    absl::Status health = service_->Health();
    if (!health.ok()) return SendError(res, 503, health.message());
    SendJson(res, 200, {{"status", "ok"}});
  });
  // Recent events (violations, compromised sandboxes, limits), oldest first; ?after=SEQ gives
  // those after the last one a reader saw, ?limit=N at most N (default and maximum 1000).
  s.Get("/v1/events", [this](const httplib::Request& req, httplib::Response& res) {
    uint64_t after = 0, limit = 1000;
    if (req.has_param("after") && !absl::SimpleAtoi(req.get_param_value("after"), &after)) {
      return SendError(res, 400, "query parameter \"after\" must be a non-negative integer");
    }
    if (req.has_param("limit") &&
        (!absl::SimpleAtoi(req.get_param_value("limit"), &limit) || limit == 0 || limit > 1000)) {
      return SendError(res, 400, "query parameter \"limit\" must be between 1 and 1000");
    }
    nlohmann::json events = nlohmann::json::array();
    for (const AgentEvent& e : service_->events().Since(after, limit))
      events.push_back(EventJson(e));
    SendJson(res, 200, {{"events", events}});
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(service_->MetricsText(), "text/plain; version=0.0.4");
  });
  s.Post("/v1/sandboxes", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<CreateRequest> request = ParseCreateRequest(req.body);
    if (!request.ok()) return SendStatus(res, request.status());
    if (!request->entrypoint.empty() && options_.execd == nullptr) {
      return SendError(res, 501, "this agent serves no execd API, so it starts no entrypoint");
    }
    // The pool's refill waits for the entrypoint's check and start (WarmPool::RefillHold).
    std::optional<WarmPool::RefillHold> hold;
    if (!request->entrypoint.empty()) hold.emplace(&service_->pool());
    absl::StatusOr<SandboxRecord> record = service_->Create(*request);
    if (!record.ok()) return SendStatus(res, record.status());
    nlohmann::json created = SandboxJson(*record, /*with_token=*/true);
    if (!request->entrypoint.empty()) {
      absl::StatusOr<std::string> command =
          options_.execd->StartEntrypoint(*record, request->entrypoint);
      if (!command.ok()) {
        // The create fails whole: no sandbox is left behind for a client that got an error.
        if (absl::Status deleted = service_->Delete(record->id).status(); !deleted.ok()) {
          LogWarning(absl::StrCat("deleting sandbox ", record->id,
                                  " whose entrypoint did not start: ", deleted.message()));
        }
        options_.execd->ForgetSandbox(record->id);
        return absl::IsInvalidArgument(command.status())
                   ? SendError(res, 400, command.status().message(), kEntrypointNotRunnableCode)
                   : SendStatus(res, command.status());
      }
      created["entrypoint_command"] = *command;
    }
    hold.reset();
    SendJson(res, 201, created);
  });
  s.Get("/v1/sandboxes", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json items = nlohmann::json::array();
    for (const SandboxRecord& record : service_->List()) {
      items.push_back(SandboxJson(record, /*with_token=*/false));
    }
    SendJson(res, 200, {{"items", items}});
  });
  s.Get(R"(/v1/sandboxes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::string id;
    if (!PathId(req, res, &id)) return;
    absl::StatusOr<SandboxRecord> record = service_->Get(id);
    if (!record.ok()) return SendStatus(res, record.status());
    SendJson(res, 200, SandboxJson(*record, /*with_token=*/false));
  });
  s.Delete(R"(/v1/sandboxes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::string id;
    if (!PathId(req, res, &id)) return;
    absl::StatusOr<CleanupReport> report = service_->Delete(id);
    if (!report.ok()) return SendStatus(res, report.status());
    if (options_.execd != nullptr) options_.execd->ForgetSandbox(id);
    SendJson(res, 200, {{"id", id}, {"cleanup", CleanupJson(*report)}});
  });
  s.Post(R"(/v1/sandboxes/([^/]+)/renew)",
         [this](const httplib::Request& req, httplib::Response& res) {
           std::string id;
           if (!PathId(req, res, &id)) return;
           absl::StatusOr<absl::Time> expires_at = ParseRenewRequest(req.body, service_->Now());
           if (!expires_at.ok()) return SendStatus(res, expires_at.status());
           absl::StatusOr<absl::Time> renewed = service_->Renew(id, *expires_at);
           if (!renewed.ok()) return SendStatus(res, renewed.status());
           SendJson(res, 200, {{"id", id}, {"expires_at", FormatApiTime(*renewed)}});
         });
  for (const char* verb : {"pause", "resume"}) {
    const bool pause = std::string(verb) == "pause";
    s.Post(absl::StrCat(R"(/v1/sandboxes/([^/]+)/)", verb),
           [this, pause](const httplib::Request& req, httplib::Response& res) {
             std::string id;
             if (!PathId(req, res, &id)) return;
             absl::StatusOr<SandboxRecord> record =
                 pause ? service_->Pause(id) : service_->Resume(id);
             if (!record.ok()) return SendStatus(res, record.status());
             SendJson(res, 200, SandboxJson(*record, /*with_token=*/false));
           });
  }
  // The per-sandbox API (execd) starts here; its authentication is done by Authorized().
  s.Get(R"(/v1/sandboxes/([^/]+)/execd/ping)",
        [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  if (options_.execd != nullptr) options_.execd->RegisterRoutes(s);
}

absl::StatusOr<int> HttpApi::Start(const std::string& address, int port) {
  return listener_.Start(address, port);
}

void HttpApi::Stop() {
  // Streams of running commands would otherwise hold their threads, and stop(), until the
  // commands end.
  if (options_.execd != nullptr) options_.execd->StopStreams();
  listener_.Stop();
}

}  // namespace moat::agent
