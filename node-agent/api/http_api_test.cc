// The node API over real HTTP on 127.0.0.1 (an ephemeral port), with the fake backend (and the
// per-sandbox API for the create with an entrypoint).
#include "node-agent/api/http_api.h"

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "node-agent/api/api_json.h"
#include "node-agent/api/execd_api.h"
#include "node-agent/backend/fake_backend.h"
#include "node-agent/testing/expect_error.h"
#include "node-agent/testing/raw_http.h"
#include "util/shell_command.h"

namespace moat::agent {
namespace {

using ::moat::agent::testing::ExpectError;

using ::nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kNodeToken[] = "node-token-0123456789abcdef";
constexpr uint64_t kMaxBody = 64 * 1024;

AgentConfig TestConfig() {
  AgentConfig config;
  config.token_file = "/unused";
  config.max_request_bytes = kMaxBody;
  config.default_ttl = absl::Minutes(10);
  config.max_ttl = absl::Hours(1);
  ProfileConfig small;
  small.name = "default";
  small.limits = Limits{2, 1 << 30, 512, 1 << 30};
  ProfileConfig python;
  python.name = "python";
  config.profiles = {small, python};
  return config;
}

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override { StartApi(nullptr); }

  // Serves the node API (and with `execd`, the per-sandbox API) on a free port of 127.0.0.1.
  void StartApi(ExecdApi* execd) {
    HttpApiOptions options{kNodeToken, kMaxBody, std::nullopt};
    options.execd = execd;
    auto api = HttpApi::Create(&service_, options);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
    auto port = api_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_connection_timeout(5);
    client_->set_read_timeout(5);
  }

  httplib::Headers Auth(const std::string& token = kNodeToken) {
    return {{"Authorization", "Bearer " + token}};
  }

  // Sends a request and returns (status, body). Fails the test if no response came.
  std::pair<int, std::string> Call(const std::string& method, const std::string& path,
                                   const std::string& body = "",
                                   httplib::Headers headers = {
                                       {"Authorization", std::string("Bearer ") + kNodeToken}}) {
    httplib::Result r = method == "GET" ? client_->Get(path, headers)
                        : method == "DELETE"
                            ? client_->Delete(path, headers)
                            : client_->Post(path, headers, body, "application/json");
    EXPECT_TRUE(r) << method << " " << path << ": " << httplib::to_string(r.error());
    if (!r) return {0, ""};
    return {r->status, r->body};
  }

  // Expects a JSON error with this status and code; returns its message.
  json Create(const std::string& body = R"({"profile": "default"})") {
    auto [status, text] = Call("POST", "/v1/sandboxes", body);
    EXPECT_EQ(status, 201) << text;
    return json::parse(text, nullptr, false);
  }

  FakeClock clock_;
  AgentConfig config_ = TestConfig();
  FakeBackend backend_;
  Registry registry_{&clock_};
  AgentMetrics metrics_{{"default", "python"}};
  SandboxService service_{&config_, &backend_, &registry_, &metrics_, &clock_};
  std::unique_ptr<HttpApi> api_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpApiTest, EveryEndpointNeedsTheNodeToken) {
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/health"},
                                                        {"GET", "/metrics"},
                                                        {"GET", "/v1/sandboxes"},
                                                        {"POST", "/v1/sandboxes"},
                                                        {"GET", "/v1/sandboxes/sb-abc"},
                                                        {"DELETE", "/v1/sandboxes/sb-abc"},
                                                        {"POST", "/v1/sandboxes/sb-abc/renew"},
                                                        {"GET", "/no/such/path"}}) {
    SCOPED_TRACE(method + " " + path);
    ExpectError(Call(method, path, R"({"profile": "default"})", {}), 401, "UNAUTHORIZED");
    ExpectError(
        Call(method, path, R"({"profile": "default"})", Auth("node-token-0123456789abcdeX")), 401,
        "UNAUTHORIZED");
    ExpectError(Call(method, path, R"({"profile": "default"})",
                     {{"Authorization", std::string("Basic ") + kNodeToken}}),
                401, "UNAUTHORIZED");
  }
  EXPECT_EQ(registry_.size(), 0u);  // No unauthorized create went through.
  EXPECT_EQ(Call("GET", "/health").first, 200);
  EXPECT_EQ(Call("GET", "/v1/sandboxes").first, 200);
}

TEST_F(HttpApiTest, CreateGetListRenewDelete) {
  json created = Create(
      R"({"profile": "default", "ttl_seconds": 120, "metadata": {"owner": "alice"},
          "env": {"LANG": "C.UTF-8"}, "limits": {"memory_bytes": 268435456}})");
  ASSERT_TRUE(created.is_object());
  std::string id = created["id"];
  EXPECT_TRUE(IsValidSandboxId(id)) << id;
  EXPECT_EQ(created["state"], "ready");
  EXPECT_EQ(created["profile"], "default");
  EXPECT_EQ(created["metadata"]["owner"], "alice");
  EXPECT_EQ(created["limits"]["memory_bytes"], 268435456);
  EXPECT_EQ(created["limits"]["pids"], 512);  // From the profile.
  EXPECT_EQ(created["expires_at"], FormatApiTime(clock_.Now() + absl::Seconds(120)));
  EXPECT_EQ(std::string(created["token"]).size(), 64u);
  EXPECT_TRUE(backend_.Exists(id));
  EXPECT_EQ(backend_.SpecOf(id).limits.memory_bytes, 268435456u);

  auto [get_status, get_body] = Call("GET", "/v1/sandboxes/" + id);
  ASSERT_EQ(get_status, 200) << get_body;
  json got = json::parse(get_body);
  EXPECT_EQ(got["id"], id);
  EXPECT_FALSE(got.contains("token"));  // Only the creator sees it.

  std::string other = Create()["id"];
  auto [list_status, list_body] = Call("GET", "/v1/sandboxes");
  ASSERT_EQ(list_status, 200);
  json list = json::parse(list_body);
  ASSERT_EQ(list["items"].size(), 2u);
  EXPECT_FALSE(list["items"][0].contains("token"));

  auto [renew_status, renew_body] =
      Call("POST", "/v1/sandboxes/" + id + "/renew", R"({"ttl_seconds": 600})");
  ASSERT_EQ(renew_status, 200) << renew_body;
  EXPECT_EQ(json::parse(renew_body)["expires_at"],
            FormatApiTime(clock_.Now() + absl::Seconds(600)));
  EXPECT_EQ(registry_.Get(id)->expires_at, clock_.Now() + absl::Seconds(600));
  ExpectError(Call("POST", "/v1/sandboxes/" + id + "/renew", R"({"ttl_seconds": 7200})"), 400,
              "INVALID_REQUEST");  // Beyond api.max_ttl.

  auto [delete_status, delete_body] = Call("DELETE", "/v1/sandboxes/" + id);
  ASSERT_EQ(delete_status, 200) << delete_body;
  EXPECT_EQ(json::parse(delete_body)["cleanup"]["workspaces_removed"], 1);
  EXPECT_FALSE(backend_.Exists(id));
  ExpectError(Call("GET", "/v1/sandboxes/" + id), 404, "NOT_FOUND");
  ExpectError(Call("DELETE", "/v1/sandboxes/" + id), 404, "NOT_FOUND");
  EXPECT_TRUE(backend_.Exists(other));
}

TEST_F(HttpApiTest, ExpiredSandboxesAreRecycled) {
  std::string id = Create(R"({"profile": "default", "ttl_seconds": 30})")["id"];
  clock_.Advance(absl::Seconds(29));
  EXPECT_EQ(service_.DeleteExpired(), 0);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(service_.DeleteExpired(), 1);
  ASSERT_TRUE(service_.WaitRecycled(absl::Seconds(10)));
  EXPECT_FALSE(backend_.Exists(id));
  ExpectError(Call("GET", "/v1/sandboxes/" + id), 404, "NOT_FOUND");
}

TEST_F(HttpApiTest, MalformedBodiesAndWrongTypesAre400) {
  struct Case {
    std::string body, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"{", "not valid JSON"},
           {"", "not valid JSON"},
           {"[1, 2]", "must be a JSON object"},
           {R"({"profile": 7})", "\"profile\" is required and must be a string"},
           {R"({})", "\"profile\" is required"},
           {R"({"profile": "default", "ttl_seconds": "60"})", "\"ttl_seconds\""},
           {R"({"profile": "default", "ttl_seconds": -5})", "\"ttl_seconds\""},
           {R"({"profile": "default", "ttl_seconds": 1.5})", "\"ttl_seconds\""},
           {R"({"profile": "default", "ttl_seconds": 99999999})", "ttl_seconds"},
           {R"({"profile": "default", "env": {"A": 1}})", "\"env.A\" must be a string"},
           {R"({"profile": "default", "env": {"A=B": "x"}})", "'='"},
           {R"({"profile": "default", "metadata": ["x"]})", "\"metadata\" must be an object"},
           {R"({"profile": "default", "limits": {"memory_bytes": "1G"}})",
            "\"limits.memory_bytes\""},
           {R"({"profile": "default", "limits": {"cpus": 0}})", "\"limits.cpus\""},
           {R"({"profile": "default", "limits": {"cpus": 8}})", "exceed profile \"default\""},
           {R"({"profile": "default", "limits": {"disk": 1}})", "unknown field \"disk\""},
           {R"({"profile": "default", "policy": "allow all"})", "\"policy\" must be an object"},
           {R"({"profile": "default", "colour": "red"})", "unknown field \"colour\""},
           {"{\"profile\": \"\xff\xfe\"}", "not valid JSON"},
           // One strict parser (util/strict_json.h): nothing is silently kept or dropped.
           {R"({"profile": "default", "profile": "other"})", "duplicate key \"profile\""},
           {R"({"profile": "default", "metadata": )" + std::string(40, '[') + std::string(40, ']') +
                "}",
            "levels deep"},
       }) {
    SCOPED_TRACE(c.body);
    EXPECT_THAT(ExpectError(Call("POST", "/v1/sandboxes", c.body), 400, "INVALID_REQUEST"),
                HasSubstr(c.expected));
  }
  std::string id = Create()["id"];
  for (std::string body :
       {"{", R"({"ttl_seconds": "x"})", R"({"expires_at": 5})", R"({"expires_at": "tomorrow"})",
        R"({})", R"({"ttl_seconds": 5, "expires_at": "2030-01-01T00:00:00Z"})"}) {
    SCOPED_TRACE(body);
    ExpectError(Call("POST", "/v1/sandboxes/" + id + "/renew", body), 400, "INVALID_REQUEST");
  }
  EXPECT_EQ(registry_.size(), 1u);
  EXPECT_EQ(backend_.live_sandboxes(), 1);
}

TEST_F(HttpApiTest, DeeplyNestedJsonIs400NotACrash) {
  std::string deep(kMaxBody - 100, '[');
  ExpectError(Call("POST", "/v1/sandboxes", deep), 400, "INVALID_REQUEST");
  std::string nested = R"({"profile": "default", "policy": )" + std::string(20000, '[') +
                       std::string(20000, ']') + "}";
  ExpectError(Call("POST", "/v1/sandboxes", nested), 400, "INVALID_REQUEST");
  std::string objects = R"({"profile": "default", "policy": )";
  for (int i = 0; i < 8000; ++i) objects += R"({"a":)";
  objects += "1" + std::string(8000, '}') + "}";
  EXPECT_THAT(ExpectError(Call("POST", "/v1/sandboxes", objects), 400, "INVALID_REQUEST"),
              HasSubstr("levels deep"));
  EXPECT_EQ(Call("GET", "/health").first, 200);
}

TEST_F(HttpApiTest, ConcurrentCreatesAndDeletesStayConsistent) {
  constexpr int kThreads = 6;
  constexpr int kRounds = 20;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, port = port_] {
      httplib::Client client("127.0.0.1", port);
      httplib::Headers auth = {{"Authorization", std::string("Bearer ") + kNodeToken}};
      for (int i = 0; i < kRounds; ++i) {
        auto created =
            client.Post("/v1/sandboxes", auth, R"({"profile": "default"})", "application/json");
        if (!created || created->status != 201) {
          ++failures;
          continue;
        }
        std::string id = json::parse(created->body)["id"];
        // Keep every other sandbox, delete the rest.
        if (i % 2 == 1) {
          auto deleted = client.Delete("/v1/sandboxes/" + id, auth);
          if (!deleted || deleted->status != 200) ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(registry_.size(), static_cast<size_t>(kThreads * kRounds / 2));
  EXPECT_EQ(backend_.live_sandboxes(), kThreads * kRounds / 2);
  EXPECT_THAT(Call("GET", "/metrics").second, HasSubstr("moat_sandboxes{state=\"ready\"} " +
                                                        std::to_string(kThreads * kRounds / 2)));
}

TEST_F(HttpApiTest, UnknownProfileIs400AndNamesTheProfiles) {
  std::string message =
      ExpectError(Call("POST", "/v1/sandboxes", R"({"profile": "ruby"})"), 400, "INVALID_REQUEST");
  EXPECT_THAT(message, HasSubstr("unknown profile \"ruby\""));
  EXPECT_THAT(message, HasSubstr("default, python"));
  EXPECT_EQ(backend_.live_sandboxes(), 0);
}

TEST_F(HttpApiTest, OversizedBodyIs413) {
  std::string huge =
      R"({"profile": "default", "metadata": {"x": ")" + std::string(kMaxBody + 1, 'a') + "\"}}";
  EXPECT_THAT(ExpectError(Call("POST", "/v1/sandboxes", huge), 413, "PAYLOAD_TOO_LARGE"),
              HasSubstr("larger than 65536 bytes"));
  EXPECT_EQ(backend_.live_sandboxes(), 0);
  // The server still answers afterwards.
  EXPECT_EQ(Call("GET", "/health").first, 200);
}

TEST_F(HttpApiTest, BadIdsAreRefused) {
  for (const std::string& id :
       std::vector<std::string>{"..", "SB-UPPER", "sb-", "sb-a.b", "sb-%2e%2e", "x",
                                "sb-" + std::string(80, 'a'), "sb-a%00b"}) {
    SCOPED_TRACE(id);
    ExpectError(Call("GET", "/v1/sandboxes/" + id), 400, "INVALID_REQUEST");
    ExpectError(Call("DELETE", "/v1/sandboxes/" + id), 400, "INVALID_REQUEST");
    ExpectError(Call("POST", "/v1/sandboxes/" + id + "/renew", R"({"ttl_seconds": 5})"), 400,
                "INVALID_REQUEST");
  }
  // Paths that leave /v1/sandboxes/{id} match no route: a JSON 404, never a file.
  for (std::string path : {"/v1/sandboxes/../../etc/passwd", "/v1/sandboxes/sb-a%2F..%2Fetc",
                           "/v1/sandboxes/sb-a/../../x"}) {
    SCOPED_TRACE(path);
    auto response = Call("GET", path);
    EXPECT_GE(response.first, 400);
    EXPECT_LT(response.first, 500);
    EXPECT_TRUE(json::parse(response.second, nullptr, false).contains("code")) << response.second;
  }
  ExpectError(Call("GET", "/v1/sandboxes/sb-0123456789abcdef"), 404, "NOT_FOUND");
}

TEST_F(HttpApiTest, BackendErrorsMapToStatuses) {
  backend_.FailNextCreate(absl::ResourceExhaustedError("node full"));
  EXPECT_THAT(ExpectError(Call("POST", "/v1/sandboxes", R"({"profile": "default"})"), 429,
                          "RESOURCE_EXHAUSTED"),
              HasSubstr("node full"));
  EXPECT_EQ(registry_.size(), 0u);  // A failed create leaves no record.
  backend_.SetNodeStatus(absl::UnavailableError("cgroups are not mounted"));
  EXPECT_THAT(ExpectError(Call("GET", "/health"), 503, "UNAVAILABLE"),
              HasSubstr("cgroups are not mounted"));
}

TEST_F(HttpApiTest, PerSandboxApiTakesOnlyThatSandboxsToken) {
  json a = Create();
  json b = Create();
  std::string path = "/v1/sandboxes/" + std::string(a["id"]) + "/execd/ping";
  ExpectError(Call("GET", path, "", {}), 401, "UNAUTHORIZED");
  ExpectError(Call("GET", path, "", Auth()), 401, "UNAUTHORIZED");  // The node token is not it.
  ExpectError(Call("GET", path, "", {{"X-EXECD-ACCESS-TOKEN", std::string(b["token"])}}), 401,
              "UNAUTHORIZED");
  EXPECT_EQ(Call("GET", path, "", {{"X-EXECD-ACCESS-TOKEN", std::string(a["token"])}}).first, 200);
  EXPECT_EQ(Call("GET", path, "", Auth(a["token"])).first, 200);
  ExpectError(Call("GET", "/v1/sandboxes/sb-nope/execd/ping", "",
                   {{"X-EXECD-ACCESS-TOKEN", std::string(a["token"])}}),
              401, "UNAUTHORIZED");
}

TEST_F(HttpApiTest, ASecondServerCannotTakeThePort) {
  auto second = HttpApi::Create(&service_, HttpApiOptions{kNodeToken, kMaxBody, std::nullopt});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->Start("127.0.0.1", port_).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Call("GET", "/health").first, 200);
}

TEST_F(HttpApiTest, MetricsReflectState) {
  backend_.SetUsage(NodeUsage{4, 1.5, 8 << 20, 1 << 20, 1000, 12});
  std::string first = Create()["id"];
  Create();
  auto [status, text] = Call("GET", "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(text, HasSubstr("moat_sandboxes{state=\"ready\"} 2"));
  EXPECT_THAT(text, HasSubstr("moat_sandbox_start_seconds_count{path=\"cold\"} 2"));
  EXPECT_THAT(text, HasSubstr("moat_node_cpu_capacity_cores 4"));
  EXPECT_THAT(text, HasSubstr("moat_node_pids_used 12"));
  ASSERT_EQ(Call("DELETE", "/v1/sandboxes/" + first).first, 200);
  text = Call("GET", "/metrics").second;
  EXPECT_THAT(text, HasSubstr("moat_sandboxes{state=\"ready\"} 1"));
  EXPECT_THAT(text, HasSubstr("moat_recycle_duration_seconds_count 1"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr(first)));  // Never a sandbox id in a label.
}

TEST_F(HttpApiTest, ProbeReportsBecomeEventsAndACompromisedSandboxIsRecycled) {
  std::string id = Create()["id"];
  service_.ReportViolation(id, "syscall", "mount");
  service_.ReportLimit(id, "near_limit", "memory", "92% of 256 MiB");
  service_.ReportHeartbeatMissed(id);
  service_.ReportEgress(id, /*allowed=*/true, "GET allowed.example");
  service_.ReportEgress(id, /*allowed=*/false, "GET evil.example denied");
  service_.ReportCompromised(id, "3 heartbeats missed");
  EXPECT_FALSE(backend_.Exists(id));  // killed at once, not after the recycle queue
  EXPECT_EQ(Call("GET", "/v1/sandboxes/" + id).first, 404);

  auto [status, text] = Call("GET", "/v1/events");
  ASSERT_EQ(status, 200) << text;
  json events = json::parse(text)["events"];
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["type"], "violation");
  EXPECT_EQ(events[0]["kind"], "syscall");
  EXPECT_EQ(events[0]["sandbox_id"], id);
  EXPECT_EQ(events[1]["type"], "near_limit");
  EXPECT_EQ(events[2]["kind"], "egress");  // the denial only
  EXPECT_EQ(events[3]["type"], "compromised");
  EXPECT_EQ(events[3]["detail"], "3 heartbeats missed");
  const int last = events[2]["seq"];
  json after = json::parse(Call("GET", "/v1/events?after=" + std::to_string(last)).second);
  ASSERT_EQ(after["events"].size(), 1u);
  EXPECT_EQ(after["events"][0]["type"], "compromised");
  ExpectError(Call("GET", "/v1/events?after=-1"), 400, "INVALID_REQUEST");
  ExpectError(Call("GET", "/v1/events?limit=0"), 400, "INVALID_REQUEST");
  EXPECT_EQ(Call("GET", "/v1/events", "", {}).first, 401);

  text = Call("GET", "/metrics").second;
  EXPECT_THAT(text, HasSubstr("moat_violations_total{kind=\"syscall\"} 1"));
  EXPECT_THAT(text, HasSubstr("moat_compromised_sandboxes_total 1"));
  EXPECT_THAT(text, HasSubstr("moat_heartbeat_misses_total 1"));
  EXPECT_THAT(text, HasSubstr("moat_egress_requests_total 2"));
  EXPECT_THAT(text, HasSubstr("moat_egress_denials_total 1"));
}

// Pipelining (RFC 9112 section 9.3): a second request sent before the first is answered is
// answered too, in order, instead of being dropped with httplib's per-request buffer.
TEST_F(HttpApiTest, PipelinedRequestsAreAllAnsweredInOrder) {
  const std::string auth = std::string("Authorization: Bearer ") + kNodeToken + "\r\n";
  const std::string request = "GET /health HTTP/1.1\r\nHost: a\r\n" + auth + "\r\n" +
                              "GET /no/such/path HTTP/1.1\r\nHost: a\r\n" + auth + "\r\n" +
                              "GET /v1/sandboxes HTTP/1.1\r\nHost: a\r\n" + auth +
                              "Connection: close\r\n\r\n";
  testing::RawExchange got = testing::SendRaw(port_, request);
  EXPECT_TRUE(got.closed) << got.received;
  size_t first = got.received.find("HTTP/1.1 200");
  size_t second = got.received.find("HTTP/1.1 404");
  size_t third = got.received.find("HTTP/1.1 200", first + 1);
  ASSERT_NE(first, std::string::npos) << got.received;
  ASSERT_NE(second, std::string::npos) << got.received;
  ASSERT_NE(third, std::string::npos) << got.received;
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
  EXPECT_THAT(got.received, HasSubstr(R"({"items":[]})"));
}

// A header value may not carry a NUL (once cut there, so "TOKEN\0junk" passed as TOKEN) or any
// other control byte: a 400, and the connection closed.
TEST_F(HttpApiTest, ControlBytesInHeadersAreRefused) {
  const std::string token(kNodeToken);
  using namespace std::string_literals;
  for (const std::string& header : std::vector<std::string>{
           "Authorization: Bearer " + token + "\0junk"s, "Authorization: Bearer " + token + "\x01",
           "X-Other: a\x7f"
           "b",
           "X-Other: a\rb", "X-Ot\0her: 1"s}) {
    SCOPED_TRACE(header);
    std::string request = "GET /v1/sandboxes HTTP/1.1\r\nHost: a\r\n";
    if (header.rfind("Authorization", 0) != 0) request += "Authorization: Bearer " + token + "\r\n";
    request += header + "\r\n\r\nGET /v1/sandboxes HTTP/1.1\r\nHost: a\r\n\r\n";
    testing::RawExchange got = testing::SendRaw(port_, request);
    EXPECT_TRUE(got.closed);
    EXPECT_EQ(got.received.rfind("HTTP/1.1 400", 0), 0u) << got.received;
    EXPECT_THAT(got.received, HasSubstr("control byte"));
    EXPECT_EQ(got.received.find("HTTP/1.1", 1), std::string::npos) << got.received;
  }
  // Tabs and text beyond ASCII are fine.
  std::string request = "GET /v1/sandboxes HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + token +
                        "\r\nX-Other: a\tb \xc3\xa9\r\nConnection: close\r\n\r\n";
  testing::RawExchange got = testing::SendRaw(port_, request);
  EXPECT_EQ(got.received.rfind("HTTP/1.1 200", 0), 0u) << got.received;
}

// The create with an entrypoint: the agent checks and starts it before it answers (one call for
// the controller). The sandbox has `tail` and nothing else: the check of any other program exits
// 1, as `command -v` does; the entrypoint runs until the sandbox goes.
class CreateWithEntrypointTest : public HttpApiTest {
 protected:
  void SetUp() override {
    backend_.SetProcessScript([this](const ExecRequest& request, FakeProcess& process) {
      {
        absl::MutexLock lock(&mu_);
        execs_.push_back(request);
      }
      if (request.command.rfind("p=", 0) == 0) {
        return request.command == EntrypointCheckCommand("tail") ? 0 : 1;
      }
      process.WaitEnded(absl::Seconds(30));
      return 0;
    });
    StartApi(&execd_);
  }
  void TearDown() override {
    for (const auto& record : service_.List()) (void)service_.Delete(record.id);
    api_.reset();  // Before execd_, which it serves.
  }

  std::pair<int, std::string> PostCreate(const std::string& body) {
    return Call("POST", "/v1/sandboxes", body);
  }
  std::vector<ExecRequest> Execs() {
    absl::MutexLock lock(&mu_);
    return execs_;
  }
  static std::map<std::string, std::string> EnvOf(const ExecRequest& request) {
    return {request.env.begin(), request.env.end()};
  }

  ExecdApi execd_{&backend_, &registry_, &metrics_, &clock_, ExecdOptions{}};
  absl::Mutex mu_;
  std::vector<ExecRequest> execs_ ABSL_GUARDED_BY(mu_);
};

TEST_F(CreateWithEntrypointTest, TheCreateChecksAndStartsItBeforeItAnswers) {
  auto [status, body] = PostCreate(
      R"({"profile": "default", "env": {"GREETING": "hi"},
          "entrypoint": ["tail", "-f", "/dev/null"]})");
  ASSERT_EQ(status, 201) << body;
  json created = json::parse(body);
  ASSERT_TRUE(created.contains("entrypoint_command")) << body;
  const std::string command = created["entrypoint_command"];
  // The check, then the start, both with the sandbox's env. The fake runs the started command
  // on a thread of its own, which may come to it after the answer.
  for (absl::Time give_up = absl::Now() + absl::Seconds(10);
       Execs().size() < 2 && absl::Now() < give_up;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  std::vector<ExecRequest> execs = Execs();
  ASSERT_EQ(execs.size(), 2u);
  EXPECT_EQ(execs[0].command, EntrypointCheckCommand("tail"));
  EXPECT_EQ(execs[1].command, "exec 'tail' '-f' '/dev/null'");
  for (const ExecRequest& exec : execs) {
    EXPECT_THAT(EnvOf(exec), ::testing::Contains(Pair("GREETING", "hi")));
  }
  // The started command is the sandbox's, as if started through execd: its status is there.
  auto state = client_->Get(absl::StrCat("/v1/sandboxes/", created["id"].get<std::string>(),
                                         "/execd/command/status/", command),
                            {{"X-EXECD-ACCESS-TOKEN", created["token"].get<std::string>()}});
  ASSERT_TRUE(state);
  ASSERT_EQ(state->status, 200) << state->body;
  json s = json::parse(state->body);
  EXPECT_EQ(s["running"], true) << state->body;
  EXPECT_EQ(s["content"], "exec 'tail' '-f' '/dev/null'") << state->body;

  // Without the field, nothing runs and the answer has no command (as before the field).
  auto [plain_status, plain] = PostCreate(R"({"profile": "default"})");
  ASSERT_EQ(plain_status, 201) << plain;
  EXPECT_FALSE(json::parse(plain).contains("entrypoint_command")) << plain;
  EXPECT_EQ(Execs().size(), 2u);
}

TEST_F(CreateWithEntrypointTest, AProgramTheSandboxCannotRunFailsTheCreateAndLeavesNothing) {
  for (const char* program : {"nope", "/no/such/program"}) {
    SCOPED_TRACE(program);
    const std::string message = ExpectError(
        PostCreate(json{{"profile", "default"}, {"entrypoint", {program, "-x"}}}.dump()), 400,
        kEntrypointNotRunnableCode);
    EXPECT_EQ(message, EntrypointNotRunnableMessage(program));
    // Only the check ran; the sandbox is gone from the agent and from its backend.
    ASSERT_FALSE(Execs().empty());
    EXPECT_EQ(Execs().back().command, EntrypointCheckCommand(program));
    EXPECT_EQ(registry_.size(), 0u);
    EXPECT_EQ(backend_.live_sandboxes(), 0);
  }
  EXPECT_EQ(Execs().size(), 2u);
}

TEST_F(CreateWithEntrypointTest, AMalformedEntrypointIsA400BeforeAnythingIsMade) {
  for (const char* entrypoint : {R"([])", R"("tail -f /dev/null")", R"(["tail", 1])", "{}"}) {
    SCOPED_TRACE(entrypoint);
    const std::string message = ExpectError(
        PostCreate(absl::StrCat(R"({"profile": "default", "entrypoint": )", entrypoint, "}")), 400,
        "INVALID_REQUEST");
    EXPECT_THAT(message, HasSubstr("\"entrypoint\""));
  }
  EXPECT_EQ(registry_.size(), 0u);
  EXPECT_EQ(backend_.live_sandboxes(), 0);
  EXPECT_TRUE(Execs().empty());
}

}  // namespace
}  // namespace moat::agent
