// The HTTP agent client's create with an entrypoint, against stand-in agents on 127.0.0.1: one
// of today (the field taken), one older than the field (refused, asked again without it), and
// the agent's answer for a program the sandbox cannot run.
#include "controller/agent_client.h"

#include <httplib.h>

#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "controller/testing/loopback_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moat::controller {
namespace {

using nlohmann::json;

// An agent's POST /v1/sandboxes that answers with `answer` (status, body) for each request body
// and keeps the bodies it was sent.
class StandInAgent {
 public:
  explicit StandInAgent(std::function<std::pair<int, json>(const json&)> answer)
      : answer_(std::move(answer)), server_([this](httplib::Server& s) {
          s.Post("/v1/sandboxes", [this](const httplib::Request& req, httplib::Response& res) {
            json body = json::parse(req.body);
            {
              absl::MutexLock lock(&mu_);
              bodies_.push_back(body);
            }
            auto [status, out] = answer_(body);
            res.status = status;
            res.set_content(out.dump(), "application/json");
          });
        }) {}
  AgentEndpoint endpoint() const { return {server_.url(), "0123456789abcdef-node", ""}; }
  std::vector<json> bodies() {
    absl::MutexLock lock(&mu_);
    return bodies_;
  }

 private:
  std::function<std::pair<int, json>(const json&)> answer_;
  absl::Mutex mu_;
  std::vector<json> bodies_ ABSL_GUARDED_BY(mu_);
  testing::LoopbackServer server_;  // Last: it serves until destroyed, before the rest goes.
};

const json kCreated = {{"id", "sb-1"}, {"token", "t"}, {"state", "ready"}, {"start_path", "warm"}};

AgentCreate WithEntrypoint() {
  AgentCreate create;
  create.profile = "default";
  create.ttl = absl::Minutes(10);
  create.entrypoint = {"tail", "-f", "/dev/null"};
  return create;
}

TEST(HttpAgentClientTest, AnAgentOfTodayStartsTheEntrypointInItsCreate) {
  StandInAgent agent([](const json& body) {
    json out = kCreated;
    if (body.contains("entrypoint")) out["entrypoint_command"] = "cmd-7";
    return std::pair{201, out};
  });
  auto created = NewHttpAgentClient()->Create(agent.endpoint(), WithEntrypoint());
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->entrypoint_command, "cmd-7");
  ASSERT_EQ(agent.bodies().size(), 1u);
  EXPECT_EQ(agent.bodies()[0]["entrypoint"], json({"tail", "-f", "/dev/null"}));
}

TEST(HttpAgentClientTest, AnAgentOlderThanTheFieldIsAskedAgainWithoutIt) {
  StandInAgent agent([](const json& body) {
    if (body.contains("entrypoint")) {
      return std::pair{400, json{{"code", "INVALID_REQUEST"},
                                 {"message",
                                  "unknown field \"entrypoint\"; allowed: env, limits, "
                                  "metadata, policy, profile, ttl_seconds"}}};
    }
    return std::pair{201, kCreated};
  });
  auto created = NewHttpAgentClient()->Create(agent.endpoint(), WithEntrypoint());
  ASSERT_TRUE(created.ok()) << created.status();
  // Not started: the controller starts it through execd (SandboxManager::StartEntrypoint).
  EXPECT_TRUE(created->entrypoint_command.empty());
  ASSERT_EQ(agent.bodies().size(), 2u);
  EXPECT_FALSE(agent.bodies()[1].contains("entrypoint"));
}

// The agent's 400 with `code`: the create's status, and how often the agent was asked.
std::pair<absl::Status, size_t> CreateAnswered400(const std::string& code,
                                                  const std::string& message) {
  StandInAgent agent([&](const json&) {
    return std::pair{400, json{{"code", code}, {"message", message}}};
  });
  absl::Status status = NewHttpAgentClient()->Create(agent.endpoint(), WithEntrypoint()).status();
  return {status, agent.bodies().size()};
}

TEST(HttpAgentClientTest, AProgramTheSandboxCannotRunIsTheClientsMistakeNotTheNodes) {
  auto [status, asked] =
      CreateAnswered400("ENTRYPOINT_NOT_RUNNABLE", "\"entrypoint\": \"nope\" is not a program ...");
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_EQ(status.message(), "\"entrypoint\": \"nope\" is not a program ...");
  EXPECT_EQ(asked, 1u);
  // Any other 400 is the node's failure (another node may take the sandbox), asked once too.
  std::tie(status, asked) =
      CreateAnswered400("INVALID_REQUEST", "\"limits\" may not exceed the profile's");
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_EQ(status.message(),
            "creating a sandbox: the agent answered 400: \"limits\" may not exceed the profile's");
  EXPECT_EQ(asked, 1u);
}

}  // namespace
}  // namespace moat::controller
