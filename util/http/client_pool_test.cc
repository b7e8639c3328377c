// The pool against a real httplib server on 127.0.0.1: calls share a kept connection, an old
// idle one is not reused, and which failures are made again on a fresh connection (only those
// that cannot have reached the peer).
#include "util/http/client_pool.h"

#include <httplib.h>

#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "util/testing/sockets.h"

namespace moat::http {
namespace {

// GET /x answers "ok" and counts the client ports (TCP connections) it was asked on.
class CountingServer {
 public:
  CountingServer() {
    server_.set_keep_alive_timeout(1);  // Stops without waiting out a kept connection long.
    server_.set_keep_alive_max_count(100);
    server_.set_tcp_nodelay(true);
    server_.Get("/x", [this](const httplib::Request& req, httplib::Response& res) {
      absl::MutexLock lock(&mu_);
      ports_.insert(req.remote_port);
      ++requests_;
      res.set_content("ok", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~CountingServer() {
    server_.stop();
    thread_.join();
  }
  Peer peer() const { return {absl::StrCat("http://127.0.0.1:", port_), ""}; }
  int port() const { return port_; }
  size_t connections() {
    absl::MutexLock lock(&mu_);
    return ports_.size();
  }
  int requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::set<int> ports_ ABSL_GUARDED_BY(mu_);
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
};

httplib::Result GetX(httplib::Client& c) { return c.Get("/x"); }

TEST(ClientPoolTest, CallsToOnePeerShareOneKeptConnectionThatSendsAtOnce) {
  CountingServer server;
  ClientPool pool;
  for (int i = 0; i < 8; ++i) {
    httplib::Result r = pool.Call(server.peer(), GetX);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->body, "ok");
  }
  EXPECT_EQ(server.connections(), 1u);
  EXPECT_EQ(pool.Idle(), 1u);
  const std::vector<int> open = moat::testing::ConnectionsTo(server.port());
  ASSERT_EQ(open.size(), 1u);
  EXPECT_TRUE(moat::testing::SendsAtOnce(open[0])) << "TCP_NODELAY is off";
}

TEST(ClientPoolTest, AConnectionIdleLongerThanMaxIdleIsNotReused) {
  CountingServer server;
  ClientPool pool({.max_idle = absl::ZeroDuration()});
  ASSERT_TRUE(pool.Call(server.peer(), GetX));
  absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(pool.Call(server.peer(), GetX));
  EXPECT_EQ(server.connections(), 2u);
  // One that keeps none connects for each call.
  ClientPool none({.max_idle_per_peer = 0});
  ASSERT_TRUE(none.Call(server.peer(), GetX));
  ASSERT_TRUE(none.Call(server.peer(), GetX));
  EXPECT_EQ(server.connections(), 4u);
  EXPECT_EQ(none.Idle(), 0u);
}

// A peer no longer called (a node gone) does not keep its idle connection open for ever: a call
// to another peer, later than max_idle, closes it.
TEST(ClientPoolTest, AnIdleConnectionToAPeerNoLongerCalledIsClosed) {
  CountingServer gone, other;
  ClientPool pool({.max_idle = absl::Milliseconds(50)});
  ASSERT_TRUE(pool.Call(gone.peer(), GetX));
  ASSERT_EQ(moat::testing::ConnectionsTo(gone.port()).size(), 1u);
  absl::SleepFor(absl::Milliseconds(80));
  ASSERT_TRUE(pool.Call(other.peer(), GetX));
  EXPECT_EQ(pool.Idle(), 1u);
  EXPECT_TRUE(moat::testing::ConnectionsTo(gone.port()).empty());
}

// A call on a kept connection, failing as httplib fails when the peer closed it under the
// write: made once more, on a new connection.
TEST(ClientPoolTest, AFailureBeforeThePeerIsMadeAgainOnANewConnection) {
  CountingServer server;
  ClientPool pool;
  ASSERT_TRUE(pool.Call(server.peer(), GetX));  // Kept.
  std::vector<httplib::Client*> used;
  httplib::Result r = pool.Call(server.peer(), [&](httplib::Client& c) {
    used.push_back(&c);
    if (used.size() == 1) return httplib::Result(nullptr, httplib::Error::Write);
    return GetX(c);
  });
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  ASSERT_EQ(used.size(), 2u);
  EXPECT_NE(used[0], used[1]) << "made again on the broken connection";
  EXPECT_EQ(server.connections(), 2u);
}

// No answer read (a timeout, a reset after the write): the peer may have acted on it (a
// create), so it is not made again; nor is a first connect that failed (the peer is down).
TEST(ClientPoolTest, AFailureThatMayHaveReachedThePeerIsNotMadeAgain) {
  CountingServer server;
  ClientPool pool;
  ASSERT_TRUE(pool.Call(server.peer(), GetX));
  int calls = 0;
  httplib::Result r = pool.Call(server.peer(), [&](httplib::Client& c) {
    ++calls;
    GetX(c);
    return httplib::Result(nullptr, httplib::Error::Read);
  });
  EXPECT_FALSE(r);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(pool.Idle(), 0u) << "a connection that failed is kept";

  calls = 0;
  r = pool.Call(server.peer(), [&](httplib::Client&) {
    ++calls;
    return httplib::Result(nullptr, httplib::Error::Connection);
  });
  EXPECT_FALSE(r);
  EXPECT_EQ(calls, 1) << "a fresh connection that failed was tried again";
}

}  // namespace
}  // namespace moat::http
