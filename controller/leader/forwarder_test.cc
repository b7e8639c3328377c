// LeaderForwarder between real HTTP servers on 127.0.0.1: a "follower" server hands requests to
// a "leader" server; no leader, a request already forwarded, and a dead leader give 503s.
#include "controller/leader/forwarder.h"

#include <httplib.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moat::controller {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class Server {
 public:
  explicit Server(std::function<void(httplib::Server&)> routes) {
    routes(server_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~Server() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  httplib::Server server_;
  int port_;
  std::thread thread_;
};

TEST(FollowerServesTest, ReadsOfSandboxesOnly) {
  EXPECT_TRUE(FollowerServes("GET", "/v1/sandboxes"));
  EXPECT_TRUE(FollowerServes("GET", "/sandboxes/abc"));
  EXPECT_TRUE(FollowerServes("GET", "/v1/sandboxes/abc/endpoints/44772"));
  EXPECT_TRUE(FollowerServes("HEAD", "/health"));
  EXPECT_TRUE(FollowerServes("GET", "/metrics"));
  EXPECT_FALSE(FollowerServes("POST", "/v1/sandboxes"));
  EXPECT_FALSE(FollowerServes("DELETE", "/v1/sandboxes/abc"));
  EXPECT_FALSE(FollowerServes("GET", "/v1/sandboxes/abc/proxy/44772/files"));
  EXPECT_FALSE(FollowerServes("GET", "/v1/nodes"));
  EXPECT_FALSE(FollowerServes("POST", "/internal/v1/nodes/n1/heartbeat"));
}

class ForwarderTest : public ::testing::Test {
 protected:
  std::optional<std::string> leader_url_;
  Server leader_{[](httplib::Server& s) {
    s.Post("/v1/sandboxes", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 202;
      res.set_header("X-From", "leader");
      res.set_content(json{{"body", req.body},
                           {"query", req.get_param_value("a")},
                           {"key", req.get_header_value("OPEN-SANDBOX-API-KEY")},
                           {"by", req.get_header_value(kForwardedHeader)},
                           {"type", req.get_header_value("Content-Type")}}
                          .dump(),
                      "application/json");
    });
  }};
  LeaderForwarder forwarder_{ForwarderOptions{
      .self = "http://follower",
      .leader = [this]() -> absl::StatusOr<std::optional<std::string>> { return leader_url_; }}};
  Server follower_{[this](httplib::Server& s) {
    auto forward = [this](const httplib::Request& req, httplib::Response& res) {
      forwarder_.Forward(req, res);
    };
    s.Post(".*", forward);
    s.Get(".*", forward);
  }};

  httplib::Result Create(httplib::Headers headers = {}) {
    httplib::Client c("127.0.0.1", follower_.port());
    headers.emplace("OPEN-SANDBOX-API-KEY", "k-123");
    return c.Post("/v1/sandboxes?a=1", headers, R"({"image":"x"})", "application/json");
  }
};

TEST_F(ForwarderTest, AWriteReachesTheLeaderWithItsBodyQueryAndKey) {
  leader_url_ = leader_.url();
  auto r = Create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(r->get_header_value("X-From"), "leader");
  json body = json::parse(r->body);
  EXPECT_EQ(body["body"], R"({"image":"x"})");
  EXPECT_EQ(body["query"], "1");
  EXPECT_EQ(body["key"], "k-123");
  EXPECT_EQ(body["by"], "http://follower");
  EXPECT_EQ(body["type"], "application/json");
}

TEST_F(ForwarderTest, NoLeaderIsA503ThatSaysSo) {
  leader_url_ = std::nullopt;
  auto r = Create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["code"], "NO_LEADER");
  EXPECT_THAT(r->body, HasSubstr("no controller replica leads"));
  leader_url_ = "http://follower";  // etcd names this replica, which does not lead yet.
  EXPECT_EQ(Create()->status, 503);
}

TEST_F(ForwarderTest, ARequestIsForwardedAtMostOnce) {
  leader_url_ = leader_.url();
  auto r = Create({{kForwardedHeader, "http://other"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_THAT(r->body, HasSubstr("leadership is changing"));
}

TEST_F(ForwarderTest, ADeadLeaderIsA503) {
  leader_url_ = "http://127.0.0.1:1";
  auto r = Create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_THAT(r->body, HasSubstr("did not answer"));
}

}  // namespace
}  // namespace moat::controller
