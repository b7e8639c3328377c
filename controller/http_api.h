// moat-controller's HTTP server (cpp-httplib):
//   - OpenSandbox's lifecycle API (../shared/specs/opensandbox/sandbox-lifecycle.yml), every
//     route at "/" and "/v1", authenticated by the OPEN-SANDBOX-API-KEY header; errors are
//     flat {"code", "message"}; X-Request-ID is echoed (or made).
//   - the node API for agents under /internal/v1/nodes (join, heartbeat: docs/controller.md),
//     and node administration under /v1/nodes (list, cordon, uncordon, drain).
//   - /health and /metrics.
// api/controller.yaml documents moat's additions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "controller/admin_api.h"
#include "controller/config.h"
#include "controller/metrics.h"
#include "controller/nodes.h"
#include "controller/precheck_gate.h"
#include "controller/sandboxes.h"
#include "controller/tenant_metrics.h"
#include "controller/tenants/run_limits.h"
#include "controller/tenants/tenants.h"
#include "util/http/client_pool.h"
#include "util/http/server.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace moat::controller {

struct HttpApiOptions {
  const ControllerConfig* config = nullptr;
  std::vector<ApiKey> api_keys;  // Empty: no key needed, every caller is tenant "default".
  std::string join_token;        // Agents prove they know it (node-agent/join_auth.h).
  // Tenants with stored, hashed keys and quotas (admin_key_file set); null: api_keys only.
  // With a registry every request needs a key, from the file or the registry.
  TenantRegistry* tenants = nullptr;
  CreateRateLimiter* create_rate = nullptr;  // With tenants: quota.creates_per_minute.
  TenantMetrics* tenant_metrics = nullptr;   // With tenants.
  AdminApi* admin = nullptr;                 // The /v1/admin routes; null: none.
  PrecheckGate* precheck = nullptr;          // Scans execd commands through the proxy; null: none.
  // POST /v1/run's language profiles and declared durations (issue 13); null: only `timeout`.
  RunLimiter* run_limits = nullptr;
  // The proxy's kept-alive connections to the agents (main shares them with its agent client);
  // null: a connection per proxied request.
  http::ClientPool* agent_connections = nullptr;
};

class HttpApi {
 public:
  // Every pointer must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Create(HttpApiOptions options, NodeTable* nodes,
                                                         SandboxManager* sandboxes,
                                                         ControllerMetrics* metrics,
                                                         const Clock* clock);
  ~HttpApi();

  // Binds address:port (0: any free port) and serves on a background thread; the bound port.
  absl::StatusOr<int> Start(const std::string& address, int port);
  void Stop();

  // With several replicas (leader/forwarder.h): `must_forward` says which requests this replica
  // hands to the leader (it may also set headers on the answer, such as X-Moat-Stale), and
  // `forward` sends one there. Set before Start.
  using Gate = std::function<bool(const httplib::Request&, httplib::Response&)>;
  using Forward = std::function<void(const httplib::Request&, httplib::Response&)>;
  void SetFollowerGate(Gate must_forward, Forward forward) {
    must_forward_ = std::move(must_forward);
    forward_ = std::move(forward);
  }
  // Called when a node joins (the reconciler); set before Start.
  void SetOnJoin(std::function<void(const std::string& node)> on_join) {
    on_join_ = std::move(on_join);
  }

 private:
  HttpApi(HttpApiOptions options, NodeTable* nodes, SandboxManager* sandboxes,
          ControllerMetrics* metrics, const Clock* clock, std::unique_ptr<httplib::Server> server);
  void Routes();
  void NodeRoutes();
  void LifecycleRoutes();
  // The caller's tenant from OPEN-SANDBOX-API-KEY, or a 401 sent and false.
  bool Tenant(const httplib::Request& req, httplib::Response& res, std::string* tenant) const;
  // Whether `key` is one of api_keys_file's (an operator's, not a stored tenant's).
  bool IsFileKey(const std::string& key) const;
  // A join's nonce seen in the last few minutes (replays are refused).
  bool NonceSeen(const std::string& nonce);

  HttpApiOptions options_;
  NodeTable* nodes_;
  SandboxManager* sandboxes_;
  ControllerMetrics* metrics_;
  const Clock* clock_;
  std::unique_ptr<httplib::Server> server_;
  std::function<void(const std::string&)> on_join_;
  Gate must_forward_;
  Forward forward_;
  http::ServerThread listener_{server_.get()};  // After server_: stops before it goes.
  absl::Mutex nonce_mu_;
  absl::flat_hash_map<std::string, absl::Time> nonces_ ABSL_GUARDED_BY(nonce_mu_);
};

// "/v1/sandboxes/abc/proxy/44772/command" -> "/sandboxes/{id}/proxy/{port}": the metrics' route
// label, whatever the ids (so label values stay few).
std::string RoutePattern(absl::string_view path);

}  // namespace moat::controller
