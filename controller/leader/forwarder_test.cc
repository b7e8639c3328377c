// LeaderForwarder between real HTTP servers on 127.0.0.1: a "follower" server hands requests to
// a "leader" server; no leader, a request already forwarded, and a dead leader give 503s.
#include "controller/leader/forwarder.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "controller/testing/loopback_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moat::controller {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

using Server = testing::LoopbackServer;

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
  // The leader's stream: one event, then (once the client saw it, or after 5 s) a second.
  std::mutex mu_;
  std::condition_variable seen_cv_;
  bool seen_ = false, second_waited_out_ = false;
  Server stream_leader_{[this](httplib::Server& s) {
    s.Get("/v1/sandboxes/sb/proxy/44772/command",
          [this](const httplib::Request&, httplib::Response& res) {
            res.set_chunked_content_provider(
                "text/event-stream", [this](size_t offset, httplib::DataSink& sink) {
                  if (offset == 0) {
                    std::string first = "data: {\"type\":\"stdout\",\"text\":\"first\"}\n\n";
                    return sink.write(first.data(), first.size());
                  }
                  {
                    std::unique_lock lock(mu_);
                    second_waited_out_ =
                        !seen_cv_.wait_for(lock, std::chrono::seconds(5), [this] { return seen_; });
                  }
                  std::string second = "data: {\"type\":\"exit\",\"code\":0}\n\n";
                  sink.write(second.data(), second.size());
                  sink.done();
                  return true;
                });
          });
  }};
  LeaderForwarder forwarder_{
      ForwarderOptions{.self = "http://follower",
                       .leader = [this](const std::optional<std::string>& refused)
                           -> absl::StatusOr<std::optional<std::string>> {
                         refused_.push_back(refused.value_or("-"));
                         if (refused && fresh_leader_url_) return fresh_leader_url_;
                         return leader_url_;
                       }}};
  // What the forwarder's leader() was told was refused, call by call ("-": nothing).
  std::vector<std::string> refused_;
  // The leader etcd names once the cached leader_url_ was refused (nullopt: the same).
  std::optional<std::string> fresh_leader_url_;
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
  EXPECT_EQ(r->get_header_value(kNotLeaderHeader), "http://follower");
}

// A replica that was the leader in this follower's last look at etcd, and is not any more
// (restarted as a follower since an election): it refuses as not leading, and the request goes
// once more to the leader etcd names now.
TEST_F(ForwarderTest, AReplicaThatNoLongerLeadsSendsTheFollowerToTheNewLeader) {
  int refusals = 0;
  LeaderForwarder old_leaders{
      ForwarderOptions{.self = "http://old-leader",
                       .leader = [](const std::optional<std::string>&)
                           -> absl::StatusOr<std::optional<std::string>> { return std::nullopt; }}};
  Server old_leader{[&](httplib::Server& s) {
    s.Post(".*", [&](const httplib::Request& req, httplib::Response& res) {
      ++refusals;
      old_leaders.Forward(req, res);
    });
  }};
  leader_url_ = old_leader.url();
  fresh_leader_url_ = leader_.url();
  auto r = Create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(r->get_header_value("X-From"), "leader");
  EXPECT_EQ(json::parse(r->body)["body"], R"({"image":"x"})");
  EXPECT_EQ(refusals, 1);
  EXPECT_EQ(refused_, (std::vector<std::string>{"-", old_leader.url()}));

  // Once only: when etcd still names a replica that refuses, the client gets its 503.
  refused_.clear();
  fresh_leader_url_ = std::nullopt;
  r = Create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_THAT(r->body, HasSubstr("leadership is changing"));
  EXPECT_EQ(refusals, 3);
  EXPECT_EQ(refused_.size(), 2u);
}

// Nobody listens where the leader was (it died, or restarts): the leader etcd names now.
TEST_F(ForwarderTest, ARefusedConnectionAsksForTheLeaderAgain) {
  leader_url_ = "http://127.0.0.1:1";
  fresh_leader_url_ = leader_.url();
  auto r = Create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(refused_, (std::vector<std::string>{"-", "http://127.0.0.1:1"}));
}

// A leader's own 503 (its store unreachable, say) is its answer: the request is not sent again.
TEST_F(ForwarderTest, TheLeadersOwn503IsPassedOnNotRetried) {
  int calls = 0;
  Server busy_leader{[&](httplib::Server& s) {
    s.Post(".*", [&](const httplib::Request&, httplib::Response& res) {
      ++calls;
      res.status = 503;
      res.set_content(R"({"code":"STORE_UNAVAILABLE","message":"etcd"})", "application/json");
    });
  }};
  leader_url_ = busy_leader.url();
  fresh_leader_url_ = leader_.url();
  auto r = Create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["code"], "STORE_UNAVAILABLE");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(refused_, std::vector<std::string>{"-"});
}

TEST_F(ForwarderTest, ADeadLeaderIsA503) {
  leader_url_ = "http://127.0.0.1:1";
  auto r = Create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_THAT(r->body, HasSubstr("did not answer"));
}

// A command's server-sent events through a follower arrive as the leader sends them: the first
// event reaches the client before the leader sends the last (it waits for the client to see
// the first), as straight from the leader.
TEST_F(ForwarderTest, AStreamArrivesEventByEventThroughTheFollower) {
  leader_url_ = stream_leader_.url();
  httplib::Client c("127.0.0.1", follower_.port());
  std::string received;
  auto r = c.Get("/v1/sandboxes/sb/proxy/44772/command", httplib::Headers{},
                 [&](const char* data, size_t n) {
                   received.append(data, n);
                   if (absl::StrContains(received, "first")) {
                     std::lock_guard lock(mu_);
                     seen_ = true;
                     seen_cv_.notify_all();
                   }
                   return true;
                 });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_THAT(received, HasSubstr("\"exit\""));
  std::lock_guard lock(mu_);
  EXPECT_FALSE(second_waited_out_) << "the follower held the first event until the stream ended";
}

}  // namespace
}  // namespace moat::controller
