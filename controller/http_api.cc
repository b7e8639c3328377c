#include "controller/http_api.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "controller/lifecycle_json.h"
#include "controller/proxy.h"
#include "util/http/reply.h"
#include "util/join_auth.h"
#include "util/log.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::controller {
namespace {

using nlohmann::json;
constexpr char kApiKeyHeader[] = "OPEN-SANDBOX-API-KEY";
// A join's timestamp may be this far from the controller's clock.
constexpr absl::Duration kJoinClockSkew = absl::Minutes(5);

// Requests a follower forwards to the leader are routed under this prefix (a space: no
// client's path holds one).
constexpr char kForwardPrefix[] = "/ forwarded";

using http::SendError;
using http::SendJson;
using http::SendStatus;

// The request's routes at "/" and at "/v1": OpenSandbox's servers answer at both.
std::string Both(absl::string_view pattern) { return absl::StrCat("(?:/v1)?", pattern); }

thread_local absl::Time request_start;

// "quota.max_cpu" in a quota refusal's message (tenants/quota.h) -> "max_cpu".
std::string QuotaNamed(absl::string_view message) {
  size_t at = message.find("quota.");
  if (at == absl::string_view::npos) return "unknown";
  absl::string_view rest = message.substr(at + 6);
  return std::string(rest.substr(0, rest.find_first_of(": ")));
}

}  // namespace

std::string RoutePattern(absl::string_view path) {
  absl::ConsumePrefix(&path, kForwardPrefix);
  absl::ConsumePrefix(&path, "/v1");
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  // parts[0] is "" (the path starts with "/").
  std::string out;
  for (size_t i = 1; i < parts.size(); ++i) {
    absl::string_view prev = parts[i - 1];
    absl::string_view part = parts[i];
    if (prev == "sandboxes" && i == 2) {
      part = "{id}";
    } else if (prev == "nodes" && part != "join") {
      part = "{name}";
    } else if ((prev == "proxy" || prev == "endpoints") && i == 4) {
      part = "{port}";
    } else if (i >= 5 && absl::StartsWith(path, "/sandboxes/") && parts[3] == "proxy") {
      break;  // What follows the port is the sandbox's own API: not a label.
    }
    absl::StrAppend(&out, "/", part);
  }
  return out.empty() ? "/" : out;
}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Create(HttpApiOptions options, NodeTable* nodes,
                                                         SandboxManager* sandboxes,
                                                         ControllerMetrics* metrics,
                                                         const Clock* clock) {
  if (options.config == nullptr) return absl::InvalidArgumentError("no config");
  if (options.join_token.size() < 16) {
    return absl::InvalidArgumentError("the join token must be at least 16 bytes");
  }
  const ControllerConfig& c = *options.config;
  ASSIGN_OR_RETURN(std::unique_ptr<httplib::Server> server,
                   http::MakeServer(c.tls_cert_file, c.tls_key_file));
  std::unique_ptr<HttpApi> api(
      new HttpApi(std::move(options), nodes, sandboxes, metrics, clock, std::move(server)));
  api->Routes();
  return api;
}

HttpApi::HttpApi(HttpApiOptions options, NodeTable* nodes, SandboxManager* sandboxes,
                 ControllerMetrics* metrics, const Clock* clock,
                 std::unique_ptr<httplib::Server> server)
    : options_(std::move(options)),
      nodes_(nodes),
      sandboxes_(sandboxes),
      metrics_(metrics),
      clock_(clock),
      server_(std::move(server)) {}

HttpApi::~HttpApi() { Stop(); }

bool HttpApi::Tenant(const httplib::Request& req, httplib::Response& res,
                     std::string* tenant) const {
  if (options_.api_keys.empty() && options_.tenants == nullptr) {
    *tenant = "default";
    return true;
  }
  std::string key = req.get_header_value(kApiKeyHeader);
  if (!key.empty()) {
    for (const ApiKey& k : options_.api_keys) {
      if (ConstantTimeEquals(key, k.key)) {
        *tenant = k.tenant;
        return true;
      }
    }
    if (options_.tenants != nullptr) {
      absl::StatusOr<std::string> t = options_.tenants->Authenticate(key);
      if (t.ok()) {
        *tenant = *std::move(t);
        return true;
      }
      if (!absl::IsUnauthenticated(t.status())) {
        SendStatus(res, t.status());  // The store failed: not the caller's fault, not a 401.
        return false;
      }
    }
  }
  SendError(res, 401, "missing or wrong API key: send it in the OPEN-SANDBOX-API-KEY header");
  return false;
}

bool HttpApi::IsFileKey(const std::string& key) const {
  for (const ApiKey& k : options_.api_keys) {
    if (!key.empty() && ConstantTimeEquals(key, k.key)) return true;
  }
  return false;
}

bool HttpApi::NonceSeen(const std::string& nonce) {
  absl::MutexLock lock(&nonce_mu_);
  absl::Time now = clock_->Now();
  for (auto it = nonces_.begin(); it != nonces_.end();) {
    if (now - it->second > 2 * kJoinClockSkew) {
      nonces_.erase(it++);
    } else {
      ++it;
    }
  }
  return !nonces_.emplace(nonce, now).second;
}

void HttpApi::Routes() {
  httplib::Server& s = *server_;
  s.set_payload_max_length(
      std::max(options_.config->max_request_bytes, options_.config->max_upload_bytes));
  http::ConfigureServer(s, {.daemon = "controller",
                            .api_doc = "api/controller.yaml",
                            .max_request_bytes = options_.config->max_request_bytes});
  // Clients (the SDK's fetch) keep connections open and reuse them: httplib's default of 5
  // requests per connection made the SDK hit a closed socket and wait out its 200 ms retry.
  // Each open connection holds a worker thread, hence the larger pool (streams hold one too).
  s.set_keep_alive_max_count(1000);
  s.new_task_queue = [] { return new httplib::ThreadPool(64); };
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    request_start = absl::Now();
    std::string id = req.get_header_value("X-Request-ID");
    if (id.empty() || id.size() > 128) id = NewToken().value_or("").substr(0, 32);
    res.set_header("X-Request-ID", id);
    // Bodies for a sandbox (uploads) may be larger than the API's own.
    const bool to_sandbox = absl::StrContains(req.path, "/proxy/");
    const uint64_t limit =
        to_sandbox ? options_.config->max_upload_bytes : options_.config->max_request_bytes;
    const char* key = to_sandbox ? "api.max_upload_bytes" : "api.max_request_bytes";
    if (!to_sandbox && absl::StrContains(req.get_header_value("Transfer-Encoding"), "chunked")) {
      res.set_header("Connection", "close");
      SendError(res, 411, "send the body with a Content-Length, not chunked");
      return httplib::Server::HandlerResponse::Handled;
    }
    uint64_t length = 0;
    if (absl::SimpleAtoi(req.get_header_value("Content-Length"), &length) && length > limit) {
      res.set_header("Connection", "close");
      SendError(
          res, 413,
          absl::StrCat("the request body is larger than ", limit, " bytes (", key, "); send less"));
      return httplib::Server::HandlerResponse::Handled;
    }
    // A follower's write goes to the leader: routed (its body read) to the forwarding route
    // below by a path prefix no client can send; httplib passes the request it owns as const.
    if (absl::StartsWith(req.path, kForwardPrefix)) {
      SendError(res, 404, "no such endpoint; see api/controller.yaml");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (must_forward_ && must_forward_(req, res)) {
      const_cast<httplib::Request&>(req).path = absl::StrCat(kForwardPrefix, req.path);
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  {
    // Set by SetFollowerGate after the routes exist; reached only through must_forward_.
    const std::string pattern = absl::StrCat(kForwardPrefix, "/.*");
    auto forward = [this](const httplib::Request& req, httplib::Response& res) {
      if (forward_) forward_(req, res);
    };
    s.Get(pattern, forward);
    s.Post(pattern, forward);
    s.Put(pattern, forward);
    s.Patch(pattern, forward);
    s.Delete(pattern, forward);
  }
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_->ObserveRequest(RoutePattern(req.path), res.status, absl::Now() - request_start);
  });
  s.Get(Both("/health"), [](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, {{"status", "healthy"}});
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    nodes_->Snapshot();  // Cheap when nothing changed.
    metrics_->SetNodes(nodes_->CountByStateAndArch());
    scheduler::Resources allocatable, allocated;
    for (const NodeView& n : nodes_->List()) {
      if (n.state == scheduler::NodeState::kLost) continue;
      allocatable.cpu += n.report.allocatable.cpu;
      allocatable.memory += n.report.allocatable.memory;
      allocatable.pids += n.report.allocatable.pids;
      allocated.cpu += n.allocated.cpu;
      allocated.memory += n.allocated.memory;
      allocated.pids += n.allocated.pids;
    }
    metrics_->SetCapacity(allocatable, allocated);
    res.set_content(metrics_->Serialize(), "text/plain; version=0.0.4");
  });
  NodeRoutes();
  LifecycleRoutes();
  if (options_.admin != nullptr) options_.admin->Register(s);
}

void HttpApi::NodeRoutes() {
  httplib::Server& s = *server_;
  // An agent joins: it proves it holds the join token, the controller proves it back.
  s.Post("/internal/v1/nodes/join", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<JoinRequest> join = ParseJoinRequest(req.body);
    if (!join.ok()) return SendStatus(res, join.status());
    absl::Duration skew = absl::FromUnixSeconds(join->timestamp) - clock_->Now();
    std::string expected =
        JoinAgentProof(options_.join_token, join->name, join->nonce, join->timestamp);
    if (!ConstantTimeEquals(expected, join->proof)) {
      LogWarning(absl::StrCat("refused a join as \"", join->name, "\": wrong join proof"));
      return SendError(res, 401,
                       "wrong join proof: the agent's controller.join_token_file must hold the "
                       "controller's join token");
    }
    if (absl::AbsDuration(skew) > kJoinClockSkew) {
      return SendError(res, 401, "the join's timestamp is more than 5 minutes off; fix the clock");
    }
    if (NonceSeen(join->nonce)) return SendError(res, 401, "a replayed join; send a fresh nonce");
    absl::StatusOr<std::string> session = nodes_->Join(join->name, join->report);
    if (!session.ok()) return SendStatus(res, session.status());
    LogInfo(absl::StrCat("node ", join->name, " joined (", join->report.arch, ", ",
                         join->report.agent_url, ")"));
    SendJson(res, 200,
             {{"session_token", *session},
              {"proof", JoinControllerProof(options_.join_token, join->name, join->nonce)},
              {"heartbeat_interval_seconds",
               absl::ToDoubleSeconds(options_.config->heartbeat_interval)}});
  });
  s.Post(
      R"(/internal/v1/nodes/([a-z0-9][a-z0-9._-]{0,62})/heartbeat)",
      [this](const httplib::Request& req, httplib::Response& res) {
        std::string name = req.matches[1].str();
        absl::StatusOr<HeartbeatRequest> heartbeat = ParseHeartbeat(req.body);
        if (!heartbeat.ok()) return SendStatus(res, heartbeat.status());
        absl::StatusOr<bool> first =
            nodes_->Heartbeat(name, BearerToken(req.get_header_value("Authorization")),
                              std::move(heartbeat->report), heartbeat->away);
        if (!first.ok()) return SendStatus(res, first.status());
        if (heartbeat->away > absl::ZeroDuration()) {
          LogInfo(absl::StrCat("node ", name, " is restarting its agent; its sandboxes are kept ",
                               absl::FormatDuration(heartbeat->away), " for the next one"));
        }
        SendJson(res, 200, json::object());
        if (*first && on_join_) on_join_(name);
      });
  s.Get("/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    json items = json::array();
    for (const NodeView& n : nodes_->List()) items.push_back(NodeJson(n));
    SendJson(res, 200, {{"items", items}});
  });
  s.Post(R"(/v1/nodes/([^/]+)/(cordon|uncordon))",
         [this](const httplib::Request& req, httplib::Response& res) {
           // Cordon and drain touch every tenant's sandboxes on the node: with tenants
           // (admin_key_file), only the admin key or an operator's api_keys_file key may.
           if (options_.admin == nullptr || !options_.admin->IsAdmin(req)) {
             std::string tenant;
             if (!Tenant(req, res, &tenant)) return;
             if (options_.admin != nullptr && !IsFileKey(req.get_header_value(kApiKeyHeader))) {
               return SendError(res, 403,
                                "node administration needs the admin key (Authorization: "
                                "Bearer) or a key from api_keys_file, not a tenant's key");
             }
           }
           std::string name = req.matches[1].str(), verb = req.matches[2].str();
           absl::Status st = nodes_->SetCordoned(name, verb == "cordon");
           if (!st.ok()) return SendStatus(res, st);
           SendJson(res, 200, NodeJson(*nodes_->Get(name)));
         });
  // Drain: cordon, and end the node's sandboxes after the grace period (they cannot move).
  s.Post(R"(/v1/nodes/([^/]+)/drain)", [this](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    absl::StatusOr<absl::Duration> grace = ParseDrain(req.body);
    if (!grace.ok()) return SendStatus(res, grace.status());
    std::string name = req.matches[1].str();
    absl::StatusOr<DrainReport> report = sandboxes_->Drain(name, *grace);
    if (!report.ok()) return SendStatus(res, report.status());
    json out = NodeJson(*nodes_->Get(name));
    out["drain"] = {{"ended", report->ended},
                    {"remaining", report->remaining},
                    {"endsAt", FormatApiTime(report->deadline)}};
    SendJson(res, 200, out);
  });
}

void HttpApi::LifecycleRoutes() {
  httplib::Server& s = *server_;
  const ControllerConfig& config = *options_.config;
  s.Post(Both("/sandboxes"), [this, &config](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    absl::StatusOr<Sandbox> spec = ParseCreateSandbox(req.body, config, clock_->Now());
    if (!spec.ok()) return SendStatus(res, spec.status());
    if (!spec->arch.empty() && !nodes_->AnyNodeHasArch(spec->arch)) {
      return SendError(res, 400,
                       absl::StrCat("no node of architecture ", spec->arch,
                                    " has joined; ask for one the fleet has, or none"));
    }
    spec->tenant = tenant;
    // The tenant's quotas (tenants/quota.h): the create rate here, the rest at admission.
    TenantQuota quota;
    if (options_.tenants != nullptr) {
      absl::StatusOr<TenantQuota> q = options_.tenants->QuotaOf(tenant);
      if (!q.ok()) return SendStatus(res, q.status());
      quota = *q;
      if (absl::Status st = options_.create_rate->Acquire(tenant, quota.creates_per_minute);
          !st.ok()) {
        options_.tenant_metrics->CountQuotaRejection(tenant, "creates_per_minute");
        return SendError(res, 429, st.message());
      }
    }
    absl::StatusOr<std::string> id = NewSandboxId();
    if (!id.ok()) return SendStatus(res, id.status());
    spec->id = *id;
    absl::StatusOr<Sandbox> created = sandboxes_->Create(*std::move(spec), quota);
    if (absl::IsPermissionDenied(created.status()) && options_.tenant_metrics != nullptr) {
      options_.tenant_metrics->CountQuotaRejection(tenant, QuotaNamed(created.status().message()));
    }
    if (!created.ok()) return SendStatus(res, created.status());
    res.set_header("Location", absl::StrCat("/v1/sandboxes/", created->id));
    SendJson(res, 202, SandboxJson(*created));
  });
  s.Get(Both("/sandboxes"), [this](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    absl::StatusOr<ListQuery> query = ParseListQuery(req.params);
    if (!query.ok()) return SendStatus(res, query.status());
    SendJson(res, 200, ListJson(sandboxes_->List(tenant), *query));
  });
  s.Get(Both("/sandboxes/([^/]+)"), [this](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    absl::StatusOr<Sandbox> sb = sandboxes_->Get(tenant, req.matches[1].str());
    if (!sb.ok()) return SendStatus(res, sb.status());
    SendJson(res, 200, SandboxJson(*sb));
  });
  s.Delete(Both("/sandboxes/([^/]+)"), [this](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    absl::Status st = sandboxes_->Delete(tenant, req.matches[1].str());
    if (!st.ok()) return SendStatus(res, st);
    res.status = 204;
  });
  s.Post(Both("/sandboxes/([^/]+)/renew-expiration"), [this](const httplib::Request& req,
                                                             httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    absl::StatusOr<absl::Time> at = ParseRenew(req.body);
    if (!at.ok()) return SendStatus(res, at.status());
    absl::StatusOr<absl::Time> renewed = sandboxes_->Renew(tenant, req.matches[1].str(), *at);
    if (!renewed.ok()) return SendStatus(res, renewed.status());
    SendJson(res, 200, {{"expiresAt", FormatApiTime(*renewed)}});
  });
  s.Patch(Both("/sandboxes/([^/]+)/metadata"), [this](const httplib::Request& req,
                                                      httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    auto patch = ParseMetadataPatch(req.body);
    if (!patch.ok()) return SendStatus(res, patch.status());
    absl::StatusOr<Sandbox> sb = sandboxes_->PatchMetadata(tenant, req.matches[1].str(), *patch);
    if (!sb.ok()) return SendStatus(res, sb.status());
    SendJson(res, 200, SandboxJson(*sb));
  });
  // OpenSandbox answers 202 and the client polls the state; moat's freezer settles within the
  // call (the agent's pause answers once frozen), so the state is already Paused (Running).
  for (const bool pause : {true, false}) {
    s.Post(Both(pause ? "/sandboxes/([^/]+)/pause" : "/sandboxes/([^/]+)/resume"),
           [this, pause](const httplib::Request& req, httplib::Response& res) {
             std::string tenant;
             if (!Tenant(req, res, &tenant)) return;
             const std::string id = req.matches[1].str();
             absl::StatusOr<Sandbox> sb =
                 pause ? sandboxes_->Pause(tenant, id) : sandboxes_->Resume(tenant, id);
             if (!sb.ok()) return SendStatus(res, sb.status());
             res.status = 202;
           });
  }
  s.Get(Both("/sandboxes/([^/]+)/endpoints/([0-9]{1,5})"),
        [this](const httplib::Request& req, httplib::Response& res) {
          std::string tenant;
          if (!Tenant(req, res, &tenant)) return;
          absl::StatusOr<Sandbox> sb = sandboxes_->Get(tenant, req.matches[1].str());
          if (!sb.ok()) return SendStatus(res, sb.status());
          int port = 0;
          if (!absl::SimpleAtoi(req.matches[2].str(), &port) || port < 1 || port > 65535) {
            return SendError(res, 400, "the port must be from 1 to 65535");
          }
          std::string host = req.get_header_value("Host");
          // The sandbox's own token: the SDK sends these headers with every execd call, and
          // the proxy takes it in place of the API key (which the SDK does not send there).
          SendJson(res, 200,
                   {{"endpoint", absl::StrCat(host, "/sandboxes/", sb->id, "/proxy/", port)},
                    {"headers", {{"X-EXECD-ACCESS-TOKEN", sb->agent_token}}}});
        });
  // The proxy to the sandbox's own API, every method (proxy.h).
  auto proxy = [this](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    absl::StatusOr<Sandbox> sb = absl::NotFoundError("");
    std::string id = req.matches[1].str();
    // The caller's API key, or the sandbox's own token (the endpoint's headers give it).
    std::string token = req.get_header_value("X-EXECD-ACCESS-TOKEN");
    if (!token.empty()) {
      sb = sandboxes_->GetForToken(id, token);
      if (!sb.ok()) return SendError(res, 401, "wrong X-EXECD-ACCESS-TOKEN for this sandbox");
    } else {
      if (!Tenant(req, res, &tenant)) return;
      sb = sandboxes_->Get(tenant, id);
    }
    if (!sb.ok()) return SendStatus(res, sb.status());
    if (sb->state != "Running") {
      return SendError(res, 409, absl::StrCat("the sandbox is ", sb->state, "; it runs nothing"));
    }
    absl::StatusOr<AgentEndpoint> agent = nodes_->Endpoint(sb->node);
    if (!agent.ok()) return SendStatus(res, agent.status());
    int port = 0;
    if (!absl::SimpleAtoi(req.matches[2].str(), &port)) return SendError(res, 400, "bad port");
    // execd's commands pass the pre-check (precheck_gate.h) on their way in.
    if (options_.precheck != nullptr && port == kExecdPort && req.method == "POST" &&
        req.matches[3].str() == "/command" && !options_.precheck->Admit(*sb, req, res)) {
      return;
    }
    ProxyToSandbox(req, res, *sb, *agent, port, req.matches[3].str(), metrics_,
                   options_.agent_connections);
  };
  const std::string proxy_route = Both("/sandboxes/([^/]+)/proxy/([0-9]{1,5})(/.*)?");
  s.Get(proxy_route, proxy);
  s.Post(proxy_route, proxy);
  s.Put(proxy_route, proxy);
  s.Patch(proxy_route, proxy);
  s.Delete(proxy_route, proxy);
  // moat's one-call run: place (warm when the request keeps to the profile), run, delete.
  s.Post("/v1/run", [this, &config](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    absl::StatusOr<RunRequest> run = ParseRunRequest(req.body, config, clock_->Now());
    if (!run.ok()) return SendStatus(res, run.status());
    // The language profile's wall and CPU limits, or the declared duration's
    // (controller/tenants/run_limits.h); a tenant that keeps underestimating gets lower ones.
    if (options_.run_limits != nullptr) {
      absl::StatusOr<RunLimits> limits =
          options_.run_limits->LimitsFor(tenant, run->profile, run->declared);
      if (!limits.ok()) return SendStatus(res, limits.status());
      if (absl::Status st = ApplyRunLimits(*run, *limits, clock_->Now()); !st.ok()) {
        return SendStatus(res, st);
      }
      res.set_header("X-Moat-Run-Limits",
                     absl::StrCat("profile=", limits->language,
                                  " wall=", absl::FormatDuration(run->command.timeout),
                                  " cpu=", absl::FormatDuration(run->command.cpu_timeout),
                                  limits->lowered ? " lowered" : ""));
    }
    if (!run->spec.arch.empty() && !nodes_->AnyNodeHasArch(run->spec.arch)) {
      return SendError(res, 400,
                       absl::StrCat("no node of architecture ", run->spec.arch,
                                    " has joined; ask for one the fleet has, or none"));
    }
    run->spec.tenant = tenant;
    // The tenant's create rate, as for a create (a run makes a sandbox too).
    if (options_.tenants != nullptr) {
      absl::StatusOr<TenantQuota> quota = options_.tenants->QuotaOf(tenant);
      if (!quota.ok()) return SendStatus(res, quota.status());
      if (absl::Status st = options_.create_rate->Acquire(tenant, quota->creates_per_minute);
          !st.ok()) {
        options_.tenant_metrics->CountQuotaRejection(tenant, "creates_per_minute");
        return SendError(res, 429, st.message());
      }
    }
    absl::StatusOr<std::string> id = NewSandboxId();
    if (!id.ok()) return SendStatus(res, id.status());
    run->spec.id = *id;
    // The pre-check (controller/precheck/): low runs; medium runs with no network (the stricter
    // policy: its egress rules are dropped) and is audited; high waits for an administrator.
    if (options_.precheck != nullptr) {
      const std::optional<precheck::Language> language =
          run->language.empty() ? std::nullopt : precheck::ParseLanguage(run->language);
      GateDecision decision =
          options_.precheck->Check(tenant, run->spec.id, run->scanned, language);
      if (!decision.status.ok()) return SendStatus(res, decision.status);
      if (!decision.policy.empty()) {
        run->spec.egress_allow.clear();
        run->spec.egress_deny.clear();
        res.set_header("X-Moat-Precheck-Policy", decision.policy);
      }
    }
    absl::StatusOr<AgentCommandResult> result = sandboxes_->Run(run->spec, run->command);
    if (!result.ok()) return SendStatus(res, result.status());
    // Declared runs are recorded (one store write each; undeclared runs write nothing), so
    // a tenant whose runs outlast their declarations gets lower defaults.
    if (options_.run_limits != nullptr && run->declared.has_value()) {
      absl::Status recorded = options_.run_limits->Record(
          tenant, {run->profile, *run->declared, result->wall,
                   absl::Seconds(result->cpu_seconds.value_or(0)), clock_->Now()});
      if (!recorded.ok()) {
        LogWarning(
            absl::StrCat("run ", run->spec.id, ": recording its duration: ", recorded.message()));
      }
    }
    if (result->status == "failed_to_start") {
      return SendError(res, 503,
                       absl::StrCat("the command could not start in the sandbox: ", result->error));
    }
    SendJson(res, 200, RunResultJson(*result));
  });
  s.Post(Both("/metrics/events"), [this](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (!Tenant(req, res, &tenant)) return;
    res.status = 204;  // Accepted, as OpenSandbox's servers do; moat keeps no client events.
  });
}

absl::StatusOr<int> HttpApi::Start(const std::string& address, int port) {
  return listener_.Start(address, port);
}

void HttpApi::Stop() { listener_.Stop(); }

}  // namespace moat::controller
