// The HTTP agent client's create with an entrypoint, against stand-in agents on 127.0.0.1: one
// of today (the field taken), one older than the field (refused, asked again without it), and
// the agent's answer for a program the sandbox cannot run.
#include "controller/agent_client.h"

#include <httplib.h>

#include <atomic>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "controller/testing/loopback_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/testing/sockets.h"

namespace moat::controller {
namespace {

using nlohmann::json;

// An agent's POST /v1/sandboxes that answers with `answer` (status, body) for each request body
// and keeps the bodies it was sent.
class StandInAgent {
 public:
  // On `port` if given (an agent restarted where it was).
  explicit StandInAgent(std::function<std::pair<int, json>(const json&)> answer, int port = 0)
      : answer_(std::move(answer)),
        server_(
            [this](httplib::Server& s) {
              // As the agent's (node-agent/api/http_api.cc): a kept connection serves on.
              s.set_keep_alive_max_count(1000);
              s.set_tcp_nodelay(true);
              // httplib's server waits out an idle connection's keep-alive before it stops.
              s.set_keep_alive_timeout(1);
              s.Post("/v1/sandboxes", [this](const httplib::Request& req, httplib::Response& res) {
                Serve(req, res);
              });
              s.Delete("/v1/sandboxes/(.*)", [this](const httplib::Request& req,
                                                    httplib::Response& res) { Serve(req, res); });
            },
            port) {}
  AgentEndpoint endpoint() const { return {server_.url(), "0123456789abcdef-node", ""}; }
  int port() const { return server_.port(); }
  std::vector<json> bodies() {
    absl::MutexLock lock(&mu_);
    return bodies_;
  }
  // How many TCP connections the requests came on (their client ports).
  size_t connections() {
    absl::MutexLock lock(&mu_);
    return client_ports_.size();
  }

 private:
  void Serve(const httplib::Request& req, httplib::Response& res) {
    json body = req.body.empty() ? json::object() : json::parse(req.body);
    {
      absl::MutexLock lock(&mu_);
      bodies_.push_back(body);
      client_ports_.insert(req.remote_port);
    }
    auto [status, out] = answer_(body);
    res.status = status;
    res.set_content(out.dump(), "application/json");
  }

  std::function<std::pair<int, json>(const json&)> answer_;
  absl::Mutex mu_;
  std::vector<json> bodies_ ABSL_GUARDED_BY(mu_);
  std::set<int> client_ports_ ABSL_GUARDED_BY(mu_);
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

// A create costs no TCP connect: the client's calls to one agent go over one kept-alive
// connection, which sends at once (TCP_NODELAY: no Nagle wait for the agent's delayed ACK).
TEST(HttpAgentClientTest, CallsToOneAgentShareOneKeptAliveConnection) {
  StandInAgent agent([](const json&) { return std::pair{201, kCreated}; });
  auto client = NewHttpAgentClient();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(client->Create(agent.endpoint(), WithEntrypoint()).ok());
    ASSERT_TRUE(client->Delete(agent.endpoint(), "sb-1").ok());
  }
  EXPECT_EQ(agent.bodies().size(), 20u);
  EXPECT_EQ(agent.connections(), 1u);
  const std::vector<int> open = moat::testing::ConnectionsTo(agent.port());
  ASSERT_EQ(open.size(), 1u) << "the connection is not kept for the next call";
  EXPECT_TRUE(moat::testing::SendsAtOnce(open[0])) << "a call waits for ACKs (Nagle)";
}

// The agent restarted between two calls (its kept connection closed): the next call is made on
// a new connection, once.
TEST(HttpAgentClientTest, AnAgentRestartedBetweenCallsIsReachedOnANewConnection) {
  auto client = NewHttpAgentClient();
  int port;
  {
    StandInAgent before([](const json&) { return std::pair{201, kCreated}; });
    port = before.port();
    ASSERT_TRUE(client->Create(before.endpoint(), WithEntrypoint()).ok());
  }
  StandInAgent after([](const json&) { return std::pair{201, kCreated}; }, port);
  ASSERT_EQ(after.port(), port);
  auto created = client->Create(after.endpoint(), WithEntrypoint());
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(after.bodies().size(), 1u);
}

// A create that reached the agent but got no answer (here: past the client's timeout) is not
// sent again, on the kept connection or a new one: the agent may have made the sandbox.
TEST(HttpAgentClientTest, ACreateThatGotNoAnswerIsNeverSentTwice) {
  std::atomic<int> seen{0};
  StandInAgent agent([&](const json&) {
    if (++seen == 2) absl::SleepFor(absl::Milliseconds(2500));  // Past the 1 s timeout.
    return std::pair{201, kCreated};
  });
  auto client = NewHttpAgentClient(absl::Seconds(1));
  ASSERT_TRUE(client->Create(agent.endpoint(), WithEntrypoint()).ok());  // Kept: reused next.
  absl::Status second = client->Create(agent.endpoint(), WithEntrypoint()).status();
  EXPECT_TRUE(absl::IsUnavailable(second)) << second;
  EXPECT_EQ(seen.load(), 2) << "the create was sent again";
}

}  // namespace
}  // namespace moat::controller
