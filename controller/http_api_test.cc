// The controller's HTTP API for real: a server on 127.0.0.1, an httplib client, a fake fleet
// behind the agent client.
#include "controller/http_api.h"

#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "controller/lifecycle_json.h"
#include "controller/store/memory_store.h"
#include "controller/testing/fake_agents.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/join_auth.h"
#include "util/testing/spoiled_json.h"

namespace moat::controller {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kKey[] = "acme-key-0123456789abcdef";
constexpr char kJoinToken[] = "join-token-0123456789abcdef";
constexpr char kAdminKey[] = "admin-key-0123456789abcdef";

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.max_request_bytes = 4096;
    config_.create_timeout = absl::Milliseconds(100);
    config_.images = {{"python:*", "default"}};
    sandboxes_ = std::make_unique<SandboxManager>(
        &store_, &nodes_, &agents_, &scheduler_, &metrics_, &clock_,
        SandboxManagerOptions{.create_timeout = config_.create_timeout,
                              .retry_interval = absl::Milliseconds(10)});
    HttpApiOptions options{&config_, {{"acme", kKey}}, kJoinToken};
    options.run_limits = &run_limits_;
    admin_ = std::make_unique<AdminApi>(kAdminKey, &tenants_, &approvals_, sandboxes_.get());
    options.admin = admin_.get();
    auto api = HttpApi::Create(std::move(options), &nodes_, sandboxes_.get(), &metrics_, &clock_);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
    api_->SetOnJoin([this](const std::string& node) { joined_.push_back(node); });
    auto port = api_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }

  httplib::Headers Auth() { return {{"OPEN-SANDBOX-API-KEY", kKey}}; }

  json Report(const std::string& name, const std::string& arch = "x86_64") {
    return {{"agent_url", "http://" + name},
            {"agent_token", "node-token-0123456789"},
            {"arch", arch},
            {"allocatable", {{"cpu", 2}, {"memory", 8LL << 30}}},
            {"profiles", {"default"}}};
  }

  // Joins as `name` and sends the first heartbeat; the session token.
  std::string JoinNode(const std::string& name, const std::string& arch = "x86_64") {
    std::string nonce = "nonce-0123456789-" + name;
    int64_t now = absl::ToUnixSeconds(absl::Now());
    json body = {{"name", name},
                 {"nonce", nonce},
                 {"timestamp", now},
                 {"proof", JoinAgentProof(kJoinToken, name, nonce, now)},
                 {"report", Report(name, arch)}};
    auto res = client_->Post("/internal/v1/nodes/join", body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    if (!res || res->status != 200) return "";
    json answer = json::parse(res->body);
    EXPECT_EQ(answer["proof"], JoinControllerProof(kJoinToken, name, nonce));
    std::string session = answer["session_token"];
    auto hb = client_->Post(absl::StrCat("/internal/v1/nodes/", name, "/heartbeat"),
                            {{"Authorization", "Bearer " + session}},
                            json{{"report", Report(name, arch)}}.dump(), "application/json");
    EXPECT_TRUE(hb && hb->status == 200) << (hb ? hb->body : "no answer");
    return session;
  }

  std::string CreateBody(const std::string& extra = "") {
    return absl::StrCat(R"({"image": {"uri": "python:3.11"}, "entrypoint": ["/bin/sh"],)",
                        R"( "timeout": 600, "resourceLimits": {"cpu": "500m", "memory": "1Gi"})",
                        extra, "}");
  }

  // The error must be flat {code, message}.
  std::string ExpectError(const httplib::Result& res, int status, const std::string& code) {
    EXPECT_TRUE(res);
    if (!res) return "";
    EXPECT_EQ(res->status, status) << res->body;
    json body = json::parse(res->body, nullptr, false);
    EXPECT_TRUE(body.is_object() && body.contains("code") && body.contains("message")) << res->body;
    if (!body.is_object()) return "";
    EXPECT_EQ(body.value("code", ""), code) << res->body;
    return body.value("message", "");
  }

  ControllerConfig config_;
  FakeClock clock_{absl::Now()};
  MemoryStore store_;
  RunLimiter run_limits_{{}, absl::Minutes(5), &store_, &clock_};
  NodeTable nodes_{&clock_, NodeTableOptions{}};
  testing::FakeAgents agents_;
  scheduler::Scheduler scheduler_;
  ControllerMetrics metrics_;
  std::unique_ptr<SandboxManager> sandboxes_;
  TenantRegistry tenants_{&store_, &clock_, /*hash_rounds=*/1};
  precheck::ApprovalQueue approvals_{&store_, &clock_, absl::Minutes(1), 8};
  std::unique_ptr<AdminApi> admin_;
  std::unique_ptr<HttpApi> api_;
  std::unique_ptr<httplib::Client> client_;
  std::vector<std::string> joined_;
};

TEST_F(HttpApiTest, HealthAndMetricsAnswerAtOnce) {
  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "healthy");
  EXPECT_EQ(client_->Get("/v1/health")->status, 200);
  // A request is counted once its answer is written, after the client has it: poll.
  std::string body;
  for (int i = 0; i < 100 && !absl::StrContains(body, "route=\"/health\""); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    auto metrics = client_->Get("/metrics");
    ASSERT_TRUE(metrics);
    body = metrics->body;
  }
  EXPECT_THAT(body, HasSubstr("moat_controller_request_duration_seconds"));
  EXPECT_THAT(body, HasSubstr("route=\"/health\""));
}

TEST_F(HttpApiTest, TheApiKeyIsRequired) {
  ExpectError(client_->Get("/v1/sandboxes"), 401, "UNAUTHORIZED");
  ExpectError(client_->Get("/v1/sandboxes", {{"OPEN-SANDBOX-API-KEY", "wrong-key-0123456789"}}),
              401, "UNAUTHORIZED");
  EXPECT_EQ(client_->Get("/v1/sandboxes", Auth())->status, 200);
}

TEST_F(HttpApiTest, CreateGetListDeleteAtBothPrefixes) {
  JoinNode("n1");
  auto created = client_->Post("/v1/sandboxes", Auth(), CreateBody(), "application/json");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 202) << created->body;
  json sb = json::parse(created->body);
  EXPECT_EQ(sb["status"]["state"], "Running");
  EXPECT_EQ(sb["image"]["uri"], "python:3.11");
  EXPECT_EQ(sb["entrypoint"], json::array({"/bin/sh"}));
  EXPECT_TRUE(sb.contains("expiresAt"));
  EXPECT_TRUE(sb.contains("createdAt"));
  std::string id = sb["id"];
  EXPECT_EQ(id.size(), 36u);  // A UUID.
  EXPECT_EQ(nodes_.Get("n1")->allocated.cpu, 0.5);
  auto got = client_->Get("/sandboxes/" + id, Auth());  // No /v1.
  ASSERT_EQ(got->status, 200);
  EXPECT_EQ(json::parse(got->body)["id"], id);
  auto list = client_->Get("/v1/sandboxes?state=Running&pageSize=1", Auth());
  ASSERT_EQ(list->status, 200) << list->body;
  json page = json::parse(list->body);
  EXPECT_EQ(page["items"].size(), 1u);
  EXPECT_EQ(page["pagination"]["totalItems"], 1);
  auto endpoint = client_->Get("/v1/sandboxes/" + id + "/endpoints/44772", Auth());
  ASSERT_EQ(endpoint->status, 200);
  EXPECT_THAT(json::parse(endpoint->body)["endpoint"].get<std::string>(),
              HasSubstr("/sandboxes/" + id + "/proxy/44772"));
  EXPECT_EQ(client_->Delete("/sandboxes/" + id, Auth())->status, 204);
  ExpectError(client_->Get("/v1/sandboxes/" + id, Auth()), 404, "NOT_FOUND");
  EXPECT_EQ(nodes_.Get("n1")->allocated.cpu, 0);
}

TEST_F(HttpApiTest, RequestIdIsEchoedOrMade) {
  auto res = client_->Get("/health", {{"X-Request-ID", "req-42"}});
  EXPECT_EQ(res->get_header_value("X-Request-ID"), "req-42");
  auto made = client_->Get("/health");
  EXPECT_EQ(made->get_header_value("X-Request-ID").size(), 32u);
}

TEST_F(HttpApiTest, BadRequestsSayWhatToFix) {
  JoinNode("n1");
  EXPECT_THAT(ExpectError(client_->Post("/v1/sandboxes", Auth(), "{not json", "application/json"),
                          400, "INVALID_REQUEST"),
              HasSubstr("JSON object"));
  EXPECT_THAT(ExpectError(client_->Post("/v1/sandboxes", Auth(), CreateBody(R"(, "colour": 1)"),
                                        "application/json"),
                          400, "INVALID_REQUEST"),
              HasSubstr("\"colour\" is not a known field"));
  EXPECT_THAT(ExpectError(client_->Post("/v1/sandboxes", Auth(),
                                        R"({"image": {"uri": "ruby:3"}, "entrypoint": ["x"]})",
                                        "application/json"),
                          400, "INVALID_REQUEST"),
              HasSubstr("images table"));
  EXPECT_THAT(ExpectError(client_->Post("/v1/sandboxes", Auth(),
                                        R"({"image": {"uri": "python:3"}, "entrypoint": ["x"],
                                            "timeout": 10})",
                                        "application/json"),
                          400, "INVALID_REQUEST"),
              HasSubstr("from 60"));
  EXPECT_THAT(
      ExpectError(client_->Post("/v1/sandboxes", Auth(),
                                CreateBody(R"(, "platform": {"os": "linux", "arch": "arm64"})"),
                                "application/json"),
                  400, "INVALID_REQUEST"),
      HasSubstr("no node of architecture aarch64"));
  EXPECT_THAT(
      ExpectError(client_->Get("/v1/sandboxes?pageSize=500", Auth()), 400, "INVALID_REQUEST"),
      HasSubstr("1 to 200"));
  ExpectError(client_->Post("/v1/sandboxes", Auth(), std::string(5000, ' '), "application/json"),
              413, "PAYLOAD_TOO_LARGE");
  ExpectError(client_->Get("/v1/nowhere", Auth()), 404, "NOT_FOUND");
  // Nothing reached an agent.
  EXPECT_EQ(agents_.Creates("http://n1"), 0);
}

TEST_F(HttpApiTest, PendingWithAReasonWhenNoNodeFits) {
  JoinNode("n1");
  auto res = client_->Post("/v1/sandboxes", Auth(),
                           R"({"image": {"uri": "python:3"}, "entrypoint": ["x"],
                               "resourceLimits": {"memory": "64Gi"}})",
                           "application/json");
  ASSERT_EQ(res->status, 202) << res->body;
  json sb = json::parse(res->body);
  EXPECT_EQ(sb["status"]["state"], "Pending");
  EXPECT_EQ(sb["status"]["message"], "0/1 nodes: 1 insufficient memory");
}

TEST_F(HttpApiTest, RenewAndMetadata) {
  JoinNode("n1");
  auto created = client_->Post("/v1/sandboxes", Auth(), CreateBody(), "application/json");
  std::string id = json::parse(created->body)["id"];
  std::string later = FormatApiTime(clock_.Now() + absl::Hours(2));
  auto renewed = client_->Post("/v1/sandboxes/" + id + "/renew-expiration", Auth(),
                               json{{"expiresAt", later}}.dump(), "application/json");
  ASSERT_EQ(renewed->status, 200) << renewed->body;
  EXPECT_EQ(json::parse(renewed->body)["expiresAt"], later);
  ExpectError(client_->Post("/v1/sandboxes/" + id + "/renew-expiration", Auth(),
                            json{{"expiresAt", "2000-01-01T00:00:00Z"}}.dump(), "application/json"),
              400, "INVALID_REQUEST");
  auto patched = client_->Patch("/v1/sandboxes/" + id + "/metadata", Auth(), R"({"team": "blue"})",
                                "application/json");
  ASSERT_EQ(patched->status, 200) << patched->body;
  EXPECT_EQ(json::parse(patched->body)["metadata"]["team"], "blue");
  auto filtered = client_->Get("/v1/sandboxes?metadata=team%3Dblue", Auth());
  EXPECT_EQ(json::parse(filtered->body)["pagination"]["totalItems"], 1);
  filtered = client_->Get("/v1/sandboxes?metadata=team%3Dred", Auth());
  EXPECT_EQ(json::parse(filtered->body)["pagination"]["totalItems"], 0);
}

TEST_F(HttpApiTest, PauseAndResumeAnswer202AndTheStateFollows) {
  JoinNode("n1");
  auto created = client_->Post("/v1/sandboxes", Auth(), CreateBody(), "application/json");
  std::string id = json::parse(created->body)["id"];
  auto paused = client_->Post("/v1/sandboxes/" + id + "/pause", Auth(), "", "application/json");
  EXPECT_EQ(paused->status, 202) << paused->body;
  EXPECT_EQ(json::parse(client_->Get("/v1/sandboxes/" + id, Auth())->body)["status"]["state"],
            "Paused");
  auto list = client_->Get("/v1/sandboxes?state=Paused", Auth());
  EXPECT_EQ(json::parse(list->body)["pagination"]["totalItems"], 1);
  // A paused sandbox runs nothing: the proxy says so.
  ExpectError(client_->Post("/v1/sandboxes/" + id + "/proxy/44772/command", Auth(),
                            R"({"command": "true"})", "application/json"),
              409, "CONFLICT");
  EXPECT_THAT(
      ExpectError(client_->Post("/v1/sandboxes/" + id + "/pause", Auth(), "", "application/json"),
                  409, "CONFLICT"),
      HasSubstr("is Paused"));
  EXPECT_EQ(client_->Post("/sandboxes/" + id + "/resume", Auth(), "", "application/json")->status,
            202);
  EXPECT_EQ(json::parse(client_->Get("/v1/sandboxes/" + id, Auth())->body)["status"]["state"],
            "Running");
  ExpectError(client_->Post("/v1/sandboxes/nope/pause", Auth(), "", "application/json"), 404,
              "NOT_FOUND");
}

TEST_F(HttpApiTest, JoinNeedsTheProofAndRefusesReplays) {
  std::string nonce = "nonce-0123456789abcdef";
  int64_t now = absl::ToUnixSeconds(absl::Now());
  json body = {{"name", "n1"},
               {"nonce", nonce},
               {"timestamp", now},
               {"proof", JoinAgentProof("another-token-0123456789", "n1", nonce, now)},
               {"report", Report("n1")}};
  EXPECT_THAT(ExpectError(client_->Post("/internal/v1/nodes/join", body.dump(), "application/json"),
                          401, "UNAUTHORIZED"),
              HasSubstr("join proof"));
  body["proof"] = JoinAgentProof(kJoinToken, "n1", nonce, now);
  EXPECT_EQ(client_->Post("/internal/v1/nodes/join", body.dump(), "application/json")->status, 200);
  EXPECT_THAT(ExpectError(client_->Post("/internal/v1/nodes/join", body.dump(), "application/json"),
                          401, "UNAUTHORIZED"),
              HasSubstr("replayed"));
  // An old timestamp, even with a right proof.
  body["nonce"] = "nonce-fresh-0123456789";
  body["timestamp"] = now - 3600;
  body["proof"] = JoinAgentProof(kJoinToken, "n1", "nonce-fresh-0123456789", now - 3600);
  EXPECT_THAT(ExpectError(client_->Post("/internal/v1/nodes/join", body.dump(), "application/json"),
                          401, "UNAUTHORIZED"),
              HasSubstr("clock"));
  // The join alone never carries the node token.
  EXPECT_FALSE(nodes_.Endpoint("n1").ok() && !nodes_.Endpoint("n1")->token.empty());
}

TEST_F(HttpApiTest, HeartbeatsNeedTheSessionAndTriggerReconcileOnce) {
  std::string session = JoinNode("n1");
  EXPECT_EQ(joined_, std::vector<std::string>{"n1"});
  ExpectError(client_->Post("/internal/v1/nodes/n1/heartbeat", {{"Authorization", "Bearer x"}},
                            json{{"report", Report("n1")}}.dump(), "application/json"),
              401, "UNAUTHORIZED");
  auto hb =
      client_->Post("/internal/v1/nodes/n1/heartbeat", {{"Authorization", "Bearer " + session}},
                    json{{"report", Report("n1")}}.dump(), "application/json");
  EXPECT_EQ(hb->status, 200);
  EXPECT_EQ(joined_.size(), 1u);
}

TEST_F(HttpApiTest, CordonUncordonDrainAndList) {
  JoinNode("n1");
  auto cordon = client_->Post("/v1/nodes/n1/cordon", Auth(), "", "application/json");
  ASSERT_EQ(cordon->status, 200) << cordon->body;
  EXPECT_EQ(json::parse(cordon->body)["cordoned"], true);
  auto res = client_->Post("/v1/sandboxes", Auth(), CreateBody(), "application/json");
  EXPECT_EQ(json::parse(res->body)["status"]["message"], "0/1 nodes: 1 cordoned");
  client_->Post("/v1/nodes/n1/uncordon", Auth(), "", "application/json");
  auto created = client_->Post("/v1/sandboxes", Auth(), CreateBody(), "application/json");
  std::string id = json::parse(created->body)["id"];
  ExpectError(client_->Post("/v1/nodes/n1/drain", Auth(), R"({"gracePeriodSeconds": -1})",
                            "application/json"),
              400, "INVALID_REQUEST");
  auto drain = client_->Post("/v1/nodes/n1/drain", Auth(), "", "application/json");
  ASSERT_EQ(drain->status, 200) << drain->body;
  EXPECT_EQ(json::parse(drain->body)["draining"], true);
  EXPECT_EQ(json::parse(drain->body)["drain"]["ended"], json::array({id}));
  json ended = json::parse(client_->Get("/v1/sandboxes/" + id, Auth())->body);
  EXPECT_EQ(ended["status"]["state"], "Failed");
  EXPECT_EQ(ended["status"]["reason"], "NODE_DRAINED");
  auto list = client_->Get("/v1/nodes", Auth());
  json nodes = json::parse(list->body)["items"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["name"], "n1");
  EXPECT_EQ(nodes[0]["state"], "Ready");
  EXPECT_FALSE(nodes[0].contains("agent_token"));
  EXPECT_THAT(list->body, ::testing::Not(HasSubstr("node-token-0123456789")));
  ExpectError(client_->Post("/v1/nodes/nope/cordon", Auth(), "", "application/json"), 404,
              "NOT_FOUND");
}

TEST_F(HttpApiTest, RunAnswersTheResultAndLeavesNothing) {
  JoinNode("n1");
  auto res = client_->Post("/v1/run", Auth(),
                           R"({"command": ["echo", "hi"], "image": {"uri": "python:3.11"}})",
                           "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  json result = json::parse(res->body);
  EXPECT_EQ(result["status"], "exited");
  EXPECT_EQ(result["exit_code"], 0);
  EXPECT_EQ(result["stdout"], "exec 'echo' 'hi'\n");  // The fake agent echoes the command.
  EXPECT_EQ(json::parse(client_->Get("/v1/sandboxes", Auth())->body)["items"].size(), 0u);
  ExpectError(client_->Post("/v1/run", Auth(), R"({"code": 1})", "application/json"), 400,
              "INVALID_REQUEST");
  EXPECT_EQ(client_->Post("/v1/run", R"({"command": "true"})", "application/json")->status, 401);
}

// Issue 13: the language profile's limits reach the agent, a longer timeout needs a declared
// duration, and declared runs are recorded against the tenant.
TEST_F(HttpApiTest, RunAppliesTheLanguageProfileAndRecordsDeclaredRuns) {
  config_.images = {{"*", "default"}};  // Before any request reads it.
  JoinNode("n1");
  auto res = client_->Post("/v1/run", Auth(), R"js({"code": "print(1)"})js", "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("X-Moat-Run-Limits"), "profile=python wall=1m cpu=15s");
  EXPECT_EQ(agents_.LastCommand().timeout, absl::Seconds(60));
  EXPECT_EQ(agents_.LastCommand().cpu_timeout, absl::Seconds(15));
  // Undeclared runs write nothing.
  EXPECT_TRUE(run_limits_.History("acme")->empty());
  std::string message =
      ExpectError(client_->Post("/v1/run", Auth(), R"({"command": "make", "timeout": 120})",
                                "application/json"),
                  400, "INVALID_REQUEST");
  EXPECT_THAT(message, HasSubstr("expectedDuration"));
  // Declared: 1.25 x the declaration, the ratio kept; recorded with what it took.
  AgentCommandResult took;
  took.status = "exited";
  took.exit_code = 0;
  took.wall = absl::Seconds(2);
  took.cpu_seconds = 0.5;
  agents_.SetCommandResult(took);
  res = client_->Post("/v1/run", Auth(), R"({"command": "make", "expectedDuration": 160})",
                      "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(agents_.LastCommand().timeout, absl::Seconds(200));
  EXPECT_EQ(agents_.LastCommand().cpu_timeout, absl::Seconds(50));
  auto history = run_limits_.History("acme");
  ASSERT_EQ(history->size(), 1u);
  EXPECT_EQ((*history)[0].language, "shell");
  EXPECT_EQ((*history)[0].declared, absl::Seconds(160));
  EXPECT_EQ((*history)[0].wall, absl::Seconds(2));
  EXPECT_EQ((*history)[0].cpu, absl::Milliseconds(500));
  ExpectError(client_->Post("/v1/run", Auth(), R"({"command": "x", "expectedDuration": 600})",
                            "application/json"),
              400, "INVALID_REQUEST");
  // A tenant that keeps outlasting its declarations gets half the defaults.
  took.wall = absl::Seconds(20);
  agents_.SetCommandResult(took);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(client_
                  ->Post("/v1/run", Auth(), R"({"command": "make", "expectedDuration": 5})",
                         "application/json")
                  ->status,
              200);
  }
  res = client_->Post("/v1/run", Auth(), R"({"command": "make"})", "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("X-Moat-Run-Limits"), "profile=shell wall=30s cpu=7.5s lowered");
  EXPECT_EQ(agents_.LastCommand().timeout, absl::Seconds(30));
}

TEST_F(HttpApiTest, MetricsShowAllocatableAndAllocatedPerResource) {
  JoinNode("n1");
  JoinNode("n2");
  ASSERT_EQ(client_->Post("/v1/sandboxes", Auth(), CreateBody(), "application/json")->status, 202);
  std::string body = client_->Get("/metrics")->body;
  EXPECT_THAT(body, HasSubstr("moat_controller_allocatable{resource=\"cpu\"} 4"));
  EXPECT_THAT(body, HasSubstr("moat_controller_allocatable{resource=\"memory\"} 17179869184"));
  EXPECT_THAT(body, HasSubstr("moat_controller_allocated{resource=\"cpu\"} 0.5"));
  EXPECT_THAT(body, HasSubstr("moat_controller_allocated{resource=\"memory\"} 1073741824"));
}

// Issue 12 point 8: nothing a client sends crashes the controller. Each route's valid body,
// spoiled every way above: the controller always answers, never with a 5xx (a handler that threw
// would answer 500), and every refusal is a flat {code, message}.
TEST_F(HttpApiTest, SpoiledBodiesGetA4xxNeverA5xx) {
  const std::string session = JoinNode("n1");
  auto created = client_->Post("/v1/sandboxes", Auth(), CreateBody(), "application/json");
  ASSERT_EQ(created->status, 202) << created->body;
  const std::string id = json::parse(created->body)["id"];
  const std::string nonce = "nonce-spoiled-0123456789";
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  struct Route {
    std::string method, path;
    json valid;
    httplib::Headers headers;
  };
  const std::vector<Route> routes = {
      {"POST", "/v1/sandboxes",
       json::parse(CreateBody(R"(, "env": {"A": "b"}, "metadata": {"team": "blue"},
           "networkPolicy": {"defaultAction": "deny",
                             "egress": [{"action": "allow", "target": "pypi.org"}]},
           "platform": {"os": "linux", "arch": "amd64"})")),
       Auth()},
      {"POST", "/v1/run",
       json{{"image", {{"uri", "python:3.11"}}},
            {"command", {"echo", "hi"}},
            {"timeout", 10},
            {"env", {{"A", "b"}}}},
       Auth()},
      {"POST", "/v1/run",
       json{{"code", "print(1)"},
            {"language", "python"},
            {"expectedDuration", 5},
            {"resourceLimits", {{"cpu", "500m"}, {"memory", "256Mi"}}},
            {"metadata", {{"k", "v"}}}},
       Auth()},
      {"POST", "/v1/sandboxes/" + id + "/renew-expiration",
       json{{"expiresAt", FormatApiTime(clock_.Now() + absl::Hours(2))}}, Auth()},
      {"PATCH", "/v1/sandboxes/" + id + "/metadata", json{{"team", "red"}, {"gone", nullptr}},
       Auth()},
      {"POST", "/v1/metrics/events", json{{"events", json::array({{{"name", "x"}}})}}, Auth()},
      {"POST",
       "/internal/v1/nodes/join",
       json{{"name", "n2"},
            {"nonce", nonce},
            {"timestamp", now},
            {"proof", JoinAgentProof(kJoinToken, "n2", nonce, now)},
            {"report", Report("n2")}},
       {}},
      {"POST",
       "/internal/v1/nodes/n1/heartbeat",
       json{{"report", Report("n1")}},
       {{"Authorization", "Bearer " + session}}},
      {"POST",
       "/v1/admin/tenants",
       json{{"name", "beta"},
            {"quota",
             {{"max_sandboxes", 3},
              {"max_cpu", 2.5},
              {"max_memory", 1 << 30},
              {"creates_per_minute", 60}}}},
       {{"Authorization", std::string("Bearer ") + kAdminKey}}},
      {"PUT",
       "/v1/admin/tenants/acme/quota",
       json{{"max_sandboxes", 3}, {"max_cpu", 2.5}, {"max_memory", 1 << 30}},
       {{"Authorization", std::string("Bearer ") + kAdminKey}}},
      {"POST",
       "/v1/admin/approvals/nope/reject",
       json{{"reason", "no"}},
       {{"Authorization", std::string("Bearer ") + kAdminKey}}},
  };
  int requests = 0;
  for (const Route& route : routes) {
    for (const json& body : moat::testing::Spoiled(route.valid)) {
      const std::string text = body.dump();
      httplib::Result res =
          route.method == "PATCH"
              ? client_->Patch(route.path, route.headers, text, "application/json")
          : route.method == "PUT"
              ? client_->Put(route.path, route.headers, text, "application/json")
              : client_->Post(route.path, route.headers, text, "application/json");
      ++requests;
      ASSERT_TRUE(res) << route.path << " gave no answer to " << text.substr(0, 300);
      EXPECT_LT(res->status, 500) << route.path << " " << text.substr(0, 300) << " -> "
                                  << res->body;
      if (res->status >= 400) {
        json error = json::parse(res->body, nullptr, false);
        EXPECT_TRUE(error.is_object() && error.contains("code") && error.contains("message"))
            << route.path << " " << text.substr(0, 300) << " -> " << res->body;
      }
    }
  }
  // Query strings too.
  for (const std::string& query : std::vector<std::string>{
           "pageSize=abc", "pageSize=-1", "pageSize=99999999999999999999", "page=0", "page=-5",
           "state=", "state=%00", "metadata=", "metadata=%3D", "metadata=a%3Db%26c", "metadata=%FF",
           "pageSize=1&pageSize=2", std::string("metadata=") + std::string(5000, 'k')}) {
    auto res = client_->Get("/v1/sandboxes?" + query, Auth());
    ASSERT_TRUE(res) << query;
    EXPECT_LT(res->status, 500) << query << " -> " << res->body;
  }
  EXPECT_GT(requests, 200);
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

TEST_F(HttpApiTest, QuotasAreBoundedAndWholeWhereTheyCount) {
  const httplib::Headers admin = {{"Authorization", std::string("Bearer ") + kAdminKey}};
  auto tenant = [&](const json& quota) {
    return client_->Post("/v1/admin/tenants", admin,
                         json{{"name", "beta"}, {"quota", quota}}.dump(), "application/json");
  };
  for (const json& bad :
       {json{{"max_sandboxes", 1.5}}, json{{"max_sandboxes", 1e308}}, json{{"max_sandboxes", -1}},
        json{{"max_memory", 1e30}}, json{{"max_memory", 0.5}}, json{{"max_cpu", 1e308}},
        json{{"creates_per_minute", "60"}}}) {
    EXPECT_THAT(ExpectError(tenant(bad), 400, "INVALID_REQUEST"), HasSubstr("quota."))
        << bad.dump();
  }
  auto made = tenant({{"max_sandboxes", 3},
                      {"max_cpu", 2.5},
                      {"max_memory", 1LL << 40},
                      {"creates_per_minute", 0.5}});
  ASSERT_EQ(made->status, 201) << made->body;
  json quota = json::parse(made->body)["quota"];
  EXPECT_EQ(quota["max_sandboxes"], 3) << quota.dump();
  EXPECT_EQ(quota["max_cpu"], 2.5);
  EXPECT_EQ(quota["max_memory"], 1LL << 40);
  EXPECT_EQ(quota["creates_per_minute"], 0.5);
}

TEST(RoutePatternTest, IdsNeverBecomeLabels) {
  EXPECT_EQ(RoutePattern("/v1/sandboxes/abc"), "/sandboxes/{id}");
  EXPECT_EQ(RoutePattern("/sandboxes/abc/endpoints/44772"), "/sandboxes/{id}/endpoints/{port}");
  EXPECT_EQ(RoutePattern("/sandboxes/abc/proxy/44772/files/x/y"), "/sandboxes/{id}/proxy/{port}");
  EXPECT_EQ(RoutePattern("/internal/v1/nodes/n1/heartbeat"), "/internal/v1/nodes/{name}/heartbeat");
  EXPECT_EQ(RoutePattern("/v1/nodes/n1/cordon"), "/nodes/{name}/cordon");
  EXPECT_EQ(RoutePattern("/health"), "/health");
}

}  // namespace
}  // namespace moat::controller
