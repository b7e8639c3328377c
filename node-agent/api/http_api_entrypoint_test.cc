// The node API's create with an entrypoint (POST /v1/sandboxes "entrypoint"), over real HTTP on
// 127.0.0.1 with the fake backend: the check and the start in the create itself, one call.
#include <httplib.h>

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "node-agent/api/execd_api.h"
#include "node-agent/api/http_api.h"
#include "node-agent/backend/fake_backend.h"
#include "node-agent/testing/expect_error.h"
#include "util/shell_command.h"

namespace moat::agent {
namespace {

using ::moat::agent::testing::ExpectError;
using ::nlohmann::json;
using ::testing::Pair;

constexpr char kNodeToken[] = "node-token-0123456789abcdef";
constexpr uint64_t kMaxBody = 64 * 1024;

AgentConfig TestConfig() {
  AgentConfig config;
  config.token_file = "/unused";
  config.max_request_bytes = kMaxBody;
  config.default_ttl = absl::Minutes(10);
  config.max_ttl = absl::Hours(1);
  ProfileConfig profile;
  profile.name = "default";
  profile.limits = Limits{2, 1 << 30, 512, 1 << 30};
  config.profiles = {profile};
  return config;
}

class CreateWithEntrypointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The sandbox has `tail` and nothing else: the check of any other program exits 1, as
    // `command -v` does. The entrypoint runs until the sandbox goes.
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
    HttpApiOptions options{kNodeToken, kMaxBody, std::nullopt};
    options.execd = &execd_;
    auto api = HttpApi::Create(&service_, options);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
    auto port = api_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_read_timeout(20);
  }
  void TearDown() override {
    for (const auto& record : service_.List()) (void)service_.Delete(record.id);
    api_->Stop();
  }

  std::pair<int, std::string> Post(const std::string& body) {
    auto r =
        client_->Post("/v1/sandboxes", {{"Authorization", std::string("Bearer ") + kNodeToken}},
                      body, "application/json");
    EXPECT_TRUE(r) << httplib::to_string(r.error());
    return r ? std::pair{r->status, r->body} : std::pair{0, std::string()};
  }
  std::vector<ExecRequest> Execs() {
    absl::MutexLock lock(&mu_);
    return execs_;
  }
  static std::map<std::string, std::string> EnvOf(const ExecRequest& request) {
    return {request.env.begin(), request.env.end()};
  }

  FakeClock clock_;
  AgentConfig config_ = TestConfig();
  FakeBackend backend_;
  Registry registry_{&clock_};
  AgentMetrics metrics_{{"default"}};
  SandboxService service_{&config_, &backend_, &registry_, &metrics_, &clock_};
  ExecdApi execd_{&backend_, &registry_, &metrics_, &clock_, ExecdOptions{}};
  std::unique_ptr<HttpApi> api_;
  std::unique_ptr<httplib::Client> client_;
  absl::Mutex mu_;
  std::vector<ExecRequest> execs_ ABSL_GUARDED_BY(mu_);
};

TEST_F(CreateWithEntrypointTest, TheCreateChecksAndStartsItBeforeItAnswers) {
  auto [status, body] = Post(
      R"({"profile": "default", "env": {"GREETING": "hi"},
          "entrypoint": ["tail", "-f", "/dev/null"]})");
  ASSERT_EQ(status, 201) << body;
  json created = json::parse(body);
  ASSERT_TRUE(created.contains("entrypoint_command")) << body;
  const std::string command = created["entrypoint_command"];
  // The check, then the start, both with the sandbox's env.
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
  auto [plain_status, plain] = Post(R"({"profile": "default"})");
  ASSERT_EQ(plain_status, 201) << plain;
  EXPECT_FALSE(json::parse(plain).contains("entrypoint_command")) << plain;
  EXPECT_EQ(Execs().size(), 2u);
}

TEST_F(CreateWithEntrypointTest, AProgramTheSandboxCannotRunFailsTheCreateAndLeavesNothing) {
  for (const char* program : {"nope", "/no/such/program"}) {
    SCOPED_TRACE(program);
    const std::string message =
        ExpectError(Post(json{{"profile", "default"}, {"entrypoint", {program, "-x"}}}.dump()), 400,
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
    const std::string message =
        ExpectError(Post(absl::StrCat(R"({"profile": "default", "entrypoint": )", entrypoint, "}")),
                    400, "INVALID_REQUEST");
    EXPECT_THAT(message, ::testing::HasSubstr("\"entrypoint\""));
  }
  EXPECT_EQ(registry_.size(), 0u);
  EXPECT_EQ(backend_.live_sandboxes(), 0);
  EXPECT_TRUE(Execs().empty());
}

}  // namespace
}  // namespace moat::agent
