// The one relay (the proxy's and the forwarder's): RelayPipe's back-pressure and cancel, and
// RelayUpstream against real HTTP servers on 127.0.0.1: an upstream that does not answer goes
// to on_failure, a sized answer arrives whole, a stream chunk by chunk.
#include "controller/leader/stream_pipe.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "controller/testing/etcd_cluster.h"
#include "controller/testing/loopback_server.h"
#include "gtest/gtest.h"

namespace moat::controller {
namespace {

TEST(RelayPipeTest, APushWaitsWhileTheBufferIsFullAndACancelReleasesIt) {
  RelayPipe pipe;
  const std::string big(RelayPipe::kMaxBuffered, 'x');
  ASSERT_TRUE(pipe.Push(big.data(), big.size()));
  std::atomic<int> pushed{-1};
  std::thread upstream([&] { pushed = pipe.Push("y", 1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(pushed.load(), -1) << "pushed past kMaxBuffered";
  std::string chunk;
  ASSERT_TRUE(pipe.Pop(&chunk));  // Room again: the waiting push goes through.
  EXPECT_EQ(chunk.size(), big.size());
  upstream.join();
  EXPECT_EQ(pushed.load(), 1);

  ASSERT_TRUE(pipe.Push(big.data(), big.size()));
  std::thread blocked([&] { pushed = pipe.Push("z", 1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pipe.Cancel();  // The client went away: the upstream stops.
  blocked.join();
  EXPECT_EQ(pushed.load(), 0);
  pipe.Close();
  ASSERT_TRUE(pipe.Pop(&chunk));
  EXPECT_EQ(chunk, "y");
  ASSERT_TRUE(pipe.Pop(&chunk));
  EXPECT_EQ(chunk.size(), big.size());
  EXPECT_FALSE(pipe.Pop(&chunk)) << "closed and empty";
}

using Server = testing::LoopbackServer;

httplib::Request Get(const std::string& path) {
  httplib::Request r;
  r.method = "GET";
  r.path = path;
  return r;
}

TEST(RelayUpstreamTest, AnUpstreamThatDoesNotAnswerGoesToOnFailure) {
  const int port = testing::FreePort();  // Nothing listens there.
  std::optional<httplib::Error> error;
  auto up = RelayUpstream::Start({.url = "http://127.0.0.1:" + std::to_string(port)}, Get("/x"),
                                 [&](httplib::Error e) { error = e; });
  EXPECT_EQ(up, nullptr);
  ASSERT_TRUE(error.has_value()) << "on_failure was not called";
  EXPECT_EQ(*error, httplib::Error::Connection);
}

TEST(RelayUpstreamTest, ASizedAnswerArrivesWholeWithItsHead) {
  Server upstream([](httplib::Server& s) {
    s.Get("/sized", [](const httplib::Request&, httplib::Response& res) {
      res.status = 201;
      res.set_header("X-Upstream", "yes");
      res.set_content(std::string(300000, 'b'), "application/json");
    });
  });
  bool failed = false;
  auto up = RelayUpstream::Start({.url = upstream.url()}, Get("/sized"),
                                 [&](httplib::Error) { failed = true; });
  ASSERT_NE(up, nullptr);
  EXPECT_FALSE(failed);
  EXPECT_EQ(up->head().status, 201);
  EXPECT_EQ(up->head().get_header_value("X-Upstream"), "yes");
  EXPECT_EQ(up->Sized(), std::string(300000, 'b'));
}

// Through a relaying server, the client sees the first event while the upstream still holds
// the second back: nothing waits for the whole answer.
TEST(RelayUpstreamTest, AStreamReachesTheClientChunkByChunk) {
  std::atomic<bool> release{false};
  Server upstream([&](httplib::Server& s) {
    s.Get("/events", [&](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/event-stream", [&](size_t, httplib::DataSink& sink) {
        sink.write("data: one\n\n", 11);
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        sink.write("data: two\n\n", 11);
        sink.done();
        return true;
      });
    });
  });
  std::atomic<size_t> relayed{0};
  Server relay([&](httplib::Server& s) {
    s.Get("/events", [&](const httplib::Request&, httplib::Response& res) {
      auto up = RelayUpstream::Start({.url = upstream.url()}, Get("/events"),
                                     [&](httplib::Error) { res.status = 599; });
      if (!up) return;
      res.status = up->head().status;
      RelayUpstream::Stream(up, res, "text/event-stream", [&](size_t n) { relayed += n; });
    });
  });
  httplib::Client client("127.0.0.1", relay.port());
  std::string received;
  bool saw_one_before_release = false;
  auto r = client.Get("/events", [&](const char* data, size_t n) {
    received.append(data, n);
    if (received.find("one") != std::string::npos && !release) {
      saw_one_before_release = true;
      release = true;
    }
    return true;
  });
  release = true;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(saw_one_before_release) << "the first event waited for the second";
  EXPECT_EQ(received, "data: one\n\ndata: two\n\n");
  EXPECT_EQ(relayed.load(), received.size());
}

// The proxy's requests to an agent share its kept connections (util/http/client_pool.h): five
// answers, one TCP connection.
TEST(RelayUpstreamTest, WithAPoolRequestsShareAKeptConnection) {
  absl::Mutex mu;
  std::set<int> client_ports;
  Server upstream([&](httplib::Server& s) {
    s.set_keep_alive_timeout(1);  // httplib's server waits out an idle connection to stop.
    s.Get("/sized", [&](const httplib::Request& req, httplib::Response& res) {
      absl::MutexLock lock(&mu);
      client_ports.insert(req.remote_port);
      res.set_content("answer", "text/plain");
    });
  });
  http::ClientPool pool;
  for (int i = 0; i < 5; ++i) {
    auto up = RelayUpstream::Start({.url = upstream.url(), .pool = &pool}, Get("/sized"),
                                   [](httplib::Error) {});
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->Sized(), "answer");
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(client_ports.size(), 1u);
}

}  // namespace
}  // namespace moat::controller
