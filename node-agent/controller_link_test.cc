// The agent's controller link against a small controller stand-in on 127.0.0.1 (the real pair
// runs in e2e/controller): it proves itself, checks the controller's proof before sending its
// node token, heartbeats, and joins again when a heartbeat is refused.
#include "node-agent/controller_link.h"

#include <httplib.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/join_auth.h"
#include "util/testing/sockets.h"
#include "util/testing/temp_dir.h"
#include "util/testing/test_ca.h"

namespace moat::agent {
namespace {

using nlohmann::json;
constexpr char kJoinToken[] = "join-token-0123456789abcdef";

class FakeController {
 public:
  // An impostor (check_agent_proof false) takes any join and answers with its own token's proof.
  // With `tls`, it serves HTTPS with the test CA's server certificate.
  explicit FakeController(std::string token, bool check_agent_proof = true,
                          const moat::testing::TestCa* tls = nullptr)
      : token_(std::move(token)),
        server_(tls ? std::make_unique<httplib::SSLServer>(tls->server_pem.c_str(),
                                                           tls->server_key.c_str())
                    : std::make_unique<httplib::Server>()),
        scheme_(tls ? "https" : "http") {
    httplib::Server& server = *server_;
    server.Post("/internal/v1/nodes/join", [this, check_agent_proof](const httplib::Request& req,
                                                                     httplib::Response& res) {
      json body = json::parse(req.body);
      absl::MutexLock lock(&mu_);
      ++joins_;
      join_bodies_.push_back(body);
      std::string name = body["name"], nonce = body["nonce"];
      if (check_agent_proof &&
          body["proof"] != JoinAgentProof(token_, name, nonce, body["timestamp"].get<int64_t>())) {
        res.status = 401;
        return;
      }
      res.set_content(json{{"session_token", absl::StrCat("session-", joins_)},
                           {"proof", JoinControllerProof(token_, name, nonce)}}
                          .dump(),
                      "application/json");
    });
    server.Post(R"(/internal/v1/nodes/([^/]+)/heartbeat)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  absl::MutexLock lock(&mu_);
                  // The link's connection is open while it waits for this answer.
                  for (int fd : moat::testing::ConnectionsTo(port_)) {
                    link_sends_at_once_.push_back(moat::testing::SendsAtOnce(fd));
                  }
                  heartbeats_.push_back(json::parse(req.body));
                  sessions_.push_back(req.get_header_value("Authorization"));
                  if (refuse_next_) {
                    refuse_next_ = false;
                    res.status = 401;
                    return;
                  }
                  res.set_content("{}", "application/json");
                });
    port_ = server.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server.is_running()) absl::SleepFor(absl::Milliseconds(1));
  }
  ~FakeController() {
    server_->stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat(scheme_, "://127.0.0.1:", port_); }
  void RefuseNextHeartbeat() {
    absl::MutexLock lock(&mu_);
    refuse_next_ = true;
  }
  int joins() {
    absl::MutexLock lock(&mu_);
    return joins_;
  }
  std::vector<json> heartbeats() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  std::vector<json> join_bodies() {
    absl::MutexLock lock(&mu_);
    return join_bodies_;
  }
  std::vector<std::string> sessions() {
    absl::MutexLock lock(&mu_);
    return sessions_;
  }
  // For each client connection seen during a heartbeat: whether it had TCP_NODELAY.
  std::vector<bool> link_sends_at_once() {
    absl::MutexLock lock(&mu_);
    return link_sends_at_once_;
  }

 private:
  std::string token_;
  std::unique_ptr<httplib::Server> server_;
  std::string scheme_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  int joins_ ABSL_GUARDED_BY(mu_) = 0;
  bool refuse_next_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<json> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<json> join_bodies_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> sessions_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> link_sends_at_once_ ABSL_GUARDED_BY(mu_);
};

NodeFacts Facts() {
  NodeFacts f;
  f.agent_url = "http://127.0.0.1:7070";
  f.agent_token = "node-token-0123456789abcdef";
  f.cpu = 2;
  f.memory = 4ULL << 30;
  f.profiles = {"default"};
  f.warm = {{"default", 2}};
  f.labels = {{"zone", "a"}};
  f.taints = {{"dedicated", "ci"}};
  return f;
}

// A link to `controller` with the join token, heartbeating every 50 ms, reporting Facts().
ControllerLinkOptions LinkTo(const FakeController& controller, std::string name = "n1") {
  return {controller.url(), kJoinToken, std::move(name), absl::Milliseconds(50)};
}
nlohmann::json Report() { return NodeReportJson(Facts()); }

bool WaitFor(const std::function<bool()>& check) {
  for (int i = 0; i < 500; ++i) {
    if (check()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return check();
}

TEST(ControllerLinkTest, JoinsThenHeartbeatsWithTheReport) {
  FakeController controller(kJoinToken);
  ControllerLink link(LinkTo(controller), Report);
  link.Start();
  ASSERT_TRUE(WaitFor([&] { return controller.heartbeats().size() >= 3; }));
  EXPECT_TRUE(link.Healthy());
  link.Stop();
  // The join never carries the node token; heartbeats do, with everything the node reports.
  ASSERT_EQ(controller.join_bodies().size(), 1u);
  EXPECT_FALSE(controller.join_bodies()[0]["report"].contains("agent_token"));
  json report = controller.heartbeats()[0]["report"];
  EXPECT_EQ(report["agent_token"], "node-token-0123456789abcdef");
  EXPECT_FALSE(report["arch"].get<std::string>().empty());
  EXPECT_FALSE(report["kernel"].get<std::string>().empty());
  EXPECT_THAT(report["cgroup"].get<std::string>(), ::testing::AnyOf("v1", "v2", "hybrid"));
  EXPECT_EQ(report["warm"]["default"], 2);
  EXPECT_EQ(report["labels"]["zone"], "a");
  EXPECT_EQ(report["taints"][0]["key"], "dedicated");
  EXPECT_EQ(controller.sessions()[0], "Bearer session-1");
  // httplib writes a request's head and its body in two segments; with Nagle's algorithm on,
  // the body waits for the controller's delayed ACK of the head (~40 ms on Linux). So the
  // link's connections send at once (TCP_NODELAY), as the controller's to etcd and agents do.
  const std::vector<bool> seen = controller.link_sends_at_once();
  ASSERT_FALSE(seen.empty()) << "no connection of the link's found in /proc/self/fd";
  for (bool at_once : seen) EXPECT_TRUE(at_once) << "a heartbeat waits for ACKs (Nagle)";
}

TEST(ControllerLinkTest, AControllerWithoutTheTokenGetsNoSecret) {
  // It answers the join, but cannot compute the proof: the agent must not heartbeat to it.
  FakeController impostor("another-token-0123456789", /*check_agent_proof=*/false);
  ControllerLink link(LinkTo(impostor), Report);
  auto joined = link.Join();
  EXPECT_FALSE(joined.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(joined.status())) << joined.status();
  EXPECT_THAT(std::string(joined.status().message()), ::testing::HasSubstr("proof is wrong"));
  link.Start();
  absl::SleepFor(absl::Milliseconds(300));
  link.Stop();
  EXPECT_FALSE(link.Healthy());
  EXPECT_TRUE(impostor.heartbeats().empty());
}

// An agent that stops and leaves its sandboxes running says for how long, in whole seconds
// rounded up, in one last heartbeat; its ordinary heartbeats say nothing of it.
TEST(ControllerLinkTest, LeavingSaysHowLongTheSandboxesStay) {
  FakeController controller(kJoinToken);
  ControllerLink link(LinkTo(controller), Report);
  link.Start();
  ASSERT_TRUE(WaitFor([&] { return controller.heartbeats().size() >= 2; }));
  link.Leave(absl::Seconds(60) + absl::Milliseconds(300));
  const std::vector<json> heartbeats = controller.heartbeats();
  for (size_t i = 0; i + 1 < heartbeats.size(); ++i) {
    EXPECT_FALSE(heartbeats[i].contains("away_for_seconds")) << heartbeats[i].dump();
  }
  EXPECT_EQ(heartbeats.back().value("away_for_seconds", 0), 61);
  EXPECT_EQ(heartbeats.back()["report"]["agent_token"], "node-token-0123456789abcdef");
  EXPECT_EQ(controller.sessions().back(), "Bearer session-1");

  // A link that never joined has nobody to tell.
  FakeController impostor("another-token-0123456789", /*check_agent_proof=*/false);
  ControllerLink unjoined(LinkTo(impostor, "n2"), Report);
  unjoined.Start();
  absl::SleepFor(absl::Milliseconds(200));
  unjoined.Leave(absl::Seconds(60));
  EXPECT_TRUE(impostor.heartbeats().empty());
}

TEST(ControllerLinkTest, JoinsAgainWhenAHeartbeatIsRefused) {
  FakeController controller(kJoinToken);
  ControllerLink link(LinkTo(controller), Report);
  link.Start();
  ASSERT_TRUE(WaitFor([&] { return controller.heartbeats().size() >= 2; }));
  controller.RefuseNextHeartbeat();
  ASSERT_TRUE(WaitFor([&] { return controller.joins() >= 2; }));
  ASSERT_TRUE(WaitFor([&] { return link.Healthy(); }));
  link.Stop();
  EXPECT_EQ(controller.sessions().back(), "Bearer session-2");
}

// Over https://, the controller's certificate is checked against controller.tls.ca before the
// join (and its proof) is sent.
class ControllerLinkTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<moat::testing::TestCa> ca =
        moat::testing::MakeTestCa(dir_.path(), {"IP:127.0.0.1"});
    if (absl::IsFailedPrecondition(ca.status())) GTEST_SKIP() << ca.status();
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
  }
  ScopedTempDir dir_;
  moat::testing::TestCa ca_;
};

TEST_F(ControllerLinkTlsTest, JoinsAControllerItsCaSigned) {
  FakeController controller(kJoinToken, true, &ca_);
  ControllerLink link({controller.url(), kJoinToken, "n1", absl::Milliseconds(50), ca_.ca_pem},
                      [] { return NodeReportJson(Facts()); });
  link.Start();
  ASSERT_TRUE(WaitFor([&] { return controller.heartbeats().size() >= 2; }));
  EXPECT_TRUE(link.Healthy());
  link.Stop();
}

TEST_F(ControllerLinkTlsTest, SendsNothingToAControllerItCannotVerify) {
  FakeController controller(kJoinToken, true, &ca_);
  // A CA that did not sign the controller's certificate, and the system's CAs (which do not
  // hold the test CA): no join reaches the controller, and the error says what to set.
  for (const std::string& ca : {ca_.other_pem, std::string()}) {
    SCOPED_TRACE(ca.empty() ? "system CAs" : ca);
    ControllerLink link({controller.url(), kJoinToken, "n1", absl::Milliseconds(50), ca},
                        [] { return NodeReportJson(Facts()); });
    auto joined = link.Join();
    ASSERT_FALSE(joined.ok());
    EXPECT_TRUE(absl::IsUnavailable(joined.status())) << joined.status();
    EXPECT_THAT(std::string(joined.status().message()), ::testing::HasSubstr("not trusted"));
    EXPECT_THAT(std::string(joined.status().message()), ::testing::HasSubstr("controller.tls.ca"));
  }
  EXPECT_EQ(controller.joins(), 0);
}

TEST_F(ControllerLinkTlsTest, AnUnreadableCaFileIsNamed) {
  FakeController controller(kJoinToken, true, &ca_);
  ControllerLink link(
      {controller.url(), kJoinToken, "n1", absl::Milliseconds(50), dir_.File("missing.pem")},
      [] { return NodeReportJson(Facts()); });
  auto joined = link.Join();
  ASSERT_FALSE(joined.ok());
  EXPECT_THAT(std::string(joined.status().message()), ::testing::HasSubstr("cannot be loaded"));
  EXPECT_THAT(std::string(joined.status().message()), ::testing::HasSubstr("controller.tls.ca"));
  EXPECT_EQ(controller.joins(), 0);
}

}  // namespace
}  // namespace moat::agent
