#include "sandbox/egress/relay.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sandbox/testing/read_to_eof.h"
#include "util/unique_fd.h"

namespace moat::egress {
namespace {

using ::moat::sandbox::testing::ReadToEof;

// A connected loopback TCP pair: `app` for the test, `proxy` (non-blocking) for the relay.
struct Pair {
  UniqueFd app;
  UniqueFd proxy;
};

Pair TcpPair() {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(listener.get(), 1), 0);
  EXPECT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &length), 0);
  Pair p;
  p.app.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(::connect(p.app.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  p.proxy.reset(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  EXPECT_TRUE(p.proxy.valid());
  return p;
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    done += n;
  }
}

struct RelayFixture : ::testing::Test {
  Pair client = TcpPair();
  Pair upstream = TcpPair();
  UniqueFd stop{::eventfd(0, EFD_CLOEXEC)};
  Sha256 hash;

  std::future<RelayResult> Start(RelayOptions options) {
    return std::async(std::launch::async, [this, options] {
      return Relay(client.proxy.get(), upstream.proxy.get(), &hash, options, stop.get());
    });
  }
};

TEST_F(RelayFixture, CopiesBothWaysAndPassesHalfCloses) {
  std::future<RelayResult> relay = Start({});
  WriteAll(client.app.get(), "abc");
  ::shutdown(client.app.get(), SHUT_WR);
  if (relay.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready) {
    FAIL() << "relay ended early: " << relay.get().error;
  }
  EXPECT_EQ(ReadToEof(upstream.app.get()), "abc");  // ends: the relay passed the client's EOF on
  const std::string big(8 << 20, 'z');
  std::thread writer([&] {
    WriteAll(upstream.app.get(), big);
    ::shutdown(upstream.app.get(), SHUT_WR);
  });
  EXPECT_EQ(ReadToEof(client.app.get()), big);
  writer.join();
  const RelayResult result = relay.get();
  EXPECT_EQ(result.error, "");
  EXPECT_EQ(result.bytes_up, 3u);
  EXPECT_EQ(result.bytes_down, big.size());
  EXPECT_EQ(hash.HexPrefix(), "ba7816bf8f01cfea");  // SHA-256("abc")
}

TEST_F(RelayFixture, UploadLimitEndsTheRelay) {
  RelayOptions options;
  options.upload_limit = 1000;
  std::future<RelayResult> relay = Start(options);
  WriteAll(client.app.get(), std::string(600, 'a'));
  std::string got;
  while (got.size() < 600) {
    char buf[1024];
    const ssize_t n = ::read(upstream.app.get(), buf, sizeof(buf));
    ASSERT_GT(n, 0);
    got.append(buf, n);
  }
  WriteAll(client.app.get(), std::string(600, 'b'));
  const RelayResult result = relay.get();
  EXPECT_EQ(result.error, "upload over 1000 bytes");
  EXPECT_EQ(result.bytes_up, 600u);
}

TEST_F(RelayFixture, IdleTimeoutEndsTheRelay) {
  RelayOptions options;
  options.idle_timeout = absl::Milliseconds(100);
  const absl::Time start = absl::Now();
  const RelayResult result = Start(options).get();
  EXPECT_EQ(result.error, "idle for 100ms");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST_F(RelayFixture, StopFdEndsTheRelay) {
  std::future<RelayResult> relay = Start({});
  const uint64_t one = 1;
  ASSERT_EQ(::write(stop.get(), &one, sizeof(one)), 8);
  ASSERT_EQ(relay.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(relay.get().error, "stopped");
}

TEST_F(RelayFixture, DownloadOnlyLeavesClientBytesUnread) {
  RelayOptions options;
  options.upload = false;
  std::future<RelayResult> relay = Start(options);
  WriteAll(client.app.get(), "ignored");
  WriteAll(upstream.app.get(), "response");
  ::shutdown(upstream.app.get(), SHUT_WR);
  char buf[64];
  ASSERT_EQ(::read(client.app.get(), buf, sizeof(buf)), 8);
  const RelayResult result = relay.get();
  EXPECT_EQ(result.error, "");
  EXPECT_EQ(result.bytes_up, 0u);
  EXPECT_EQ(result.bytes_down, 8u);
  EXPECT_EQ(hash.HexPrefix(), "");
}

TEST_F(RelayFixture, ClientVanishingMidDownloadEndsTheRelay) {
  std::future<RelayResult> relay = Start({});
  client.app.reset();  // the client goes away entirely
  std::thread writer([&] {
    const std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 64; ++i) {
      if (::send(upstream.app.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) return;
    }
  });
  ASSERT_EQ(relay.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(relay.get().error, "");
  upstream.proxy.reset();  // unblocks the writer
  writer.join();
}

}  // namespace
}  // namespace moat::egress
