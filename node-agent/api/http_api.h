// The agent's HTTP server (cpp-httplib): the node API under /v1, /health and /metrics, and the
// start of the per-sandbox API under /v1/sandboxes/{id}/execd. Every call is authenticated:
// the node token (Authorization: Bearer) for the node API, /health and /metrics; the sandbox's
// own token (X-EXECD-ACCESS-TOKEN, as OpenSandbox's execd, or Authorization: Bearer) for its
// per-sandbox API. Every error is a 4xx/5xx with {"error": {"code", "message"}}.
// api/node-agent.yaml documents it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "node-agent/config/config.h"
#include "node-agent/service.h"
#include "util/http/server.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace moat::agent {

class ExecdApi;

struct HttpApiOptions {
  std::string node_token;                // Required, at least 16 bytes.
  uint64_t max_request_bytes = 1 << 20;  // Larger bodies get 413 (uploads: see ExecdOptions).
  std::optional<TlsConfig> tls;          // Serve HTTPS with this certificate and key.
  // The per-sandbox API beyond /ping (execd_api.h); must outlive the server. Null: only /ping.
  ExecdApi* execd = nullptr;
};

class HttpApi {
 public:
  // `service` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Create(SandboxService* service,
                                                         HttpApiOptions options);
  ~HttpApi();  // Stops the server.

  // Binds `address`:`port` (0: any free port) and serves on a background thread. Returns the
  // bound port.
  absl::StatusOr<int> Start(const std::string& address, int port);
  // Stops accepting, finishes running handlers, joins the thread. Idempotent.
  void Stop();

 private:
  HttpApi(SandboxService* service, HttpApiOptions options, std::unique_ptr<httplib::Server> server);
  void Routes();
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  // 413 (411 for chunked bodies) before the body is read: uploads may be larger than the rest.
  bool WithinBodyLimit(const httplib::Request& req, httplib::Response& res) const;

  SandboxService* service_;
  HttpApiOptions options_;
  std::unique_ptr<httplib::Server> server_;
  uint64_t server_payload_limit_ = 0;           // httplib's own cap: the larger of the two limits.
  http::ServerThread listener_{server_.get()};  // After server_: stops before it goes.
};

}  // namespace moat::agent
