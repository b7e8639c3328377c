#include "sandbox/egress/dns_stub.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/egress/dns_message.h"
#include "sandbox/testing/ip_literals.h"
#include "sandbox/values/ip_address.h"
#include "util/unique_fd.h"

namespace moat::egress {
namespace {

using testing::V4;
using testing::V6;

using ::testing::ElementsAre;
using ::testing::IsEmpty;

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  return address;
}

uint16_t PortOf(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

// Waits for `fd` to be readable; false on timeout.
bool Readable(int fd, absl::Duration timeout) {
  pollfd entry = {fd, POLLIN, 0};
  return poll(&entry, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1;
}

// A stub on 127.0.0.1 (UDP and TCP on ephemeral ports) served on its own thread.
class StubHarness {
 public:
  explicit StubHarness(StubAnswerer answerer) {
    UniqueFd udp(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in address = Loopback(0);
    EXPECT_EQ(bind(udp.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    udp_port_ = PortOf(udp.get());
    UniqueFd tcp(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(bind(tcp.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(tcp.get(), 64), 0);
    tcp_port_ = PortOf(tcp.get());
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    stop_read_ = UniqueFd(fds[0]);
    stop_write_ = UniqueFd(fds[1]);
    stub_ = std::make_unique<DnsStub>(std::move(udp), std::move(tcp), std::move(answerer));
    thread_ = std::thread([this] {
      stub_->Serve(stop_read_.get());
      returned_.Notify();
    });
  }

  ~StubHarness() {
    Stop();
    thread_.join();
  }

  void Stop() {
    if (stop_write_) {
      const char byte = 's';
      EXPECT_EQ(write(stop_write_.get(), &byte, 1), 1);
      stop_write_.reset();
    }
  }
  bool WaitReturned(absl::Duration timeout) {
    return returned_.WaitForNotificationWithTimeout(timeout);
  }

  // Sends `message` from a fresh UDP socket; the reply, or nothing within `timeout`.
  std::optional<std::vector<uint8_t>> Udp(const std::vector<uint8_t>& message,
                                          absl::Duration timeout = absl::Seconds(3)) const {
    UniqueFd fd = UdpSend(message);
    return UdpReceive(fd.get(), timeout);
  }
  UniqueFd UdpSend(const std::vector<uint8_t>& message) const {
    UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in address = Loopback(udp_port_);
    EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(send(fd.get(), message.data(), message.size(), 0),
              static_cast<ssize_t>(message.size()));
    return fd;
  }
  static std::optional<std::vector<uint8_t>> UdpReceive(int fd, absl::Duration timeout) {
    if (!Readable(fd, timeout)) return std::nullopt;
    std::vector<uint8_t> reply(65536);
    const ssize_t n = recv(fd, reply.data(), reply.size(), 0);
    if (n < 0) return std::nullopt;
    reply.resize(n);
    return reply;
  }

  UniqueFd TcpConnect() const {
    UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address = Loopback(tcp_port_);
    EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    return fd;
  }
  // One framed exchange on `fd`; nothing if the stub closed the connection or did not answer.
  static std::optional<std::vector<uint8_t>> Tcp(int fd, const std::vector<uint8_t>& message) {
    std::vector<uint8_t> framed = {static_cast<uint8_t>(message.size() >> 8),
                                   static_cast<uint8_t>(message.size())};
    framed.insert(framed.end(), message.begin(), message.end());
    if (send(fd, framed.data(), framed.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(framed.size())) {
      return std::nullopt;
    }
    if (!Readable(fd, absl::Seconds(3))) return std::nullopt;
    uint8_t length[2];
    if (recv(fd, length, 2, MSG_WAITALL) != 2) return std::nullopt;
    std::vector<uint8_t> reply(length[0] << 8 | length[1]);
    if (recv(fd, reply.data(), reply.size(), MSG_WAITALL) != static_cast<ssize_t>(reply.size())) {
      return std::nullopt;
    }
    return reply;
  }

 private:
  uint16_t udp_port_ = 0;
  uint16_t tcp_port_ = 0;
  UniqueFd stop_read_;
  UniqueFd stop_write_;
  std::unique_ptr<DnsStub> stub_;
  std::thread thread_;
  absl::Notification returned_;
};

// The policy of the tests: two names exist, "slow.test" takes a second, "blocked.test" waits for
// the test, "many.test" has 40 addresses, everything else is outside the policy.
class DnsStubTest : public ::testing::Test {
 protected:
  StubAnswerer Answerer() {
    return [this](const DnsQuestion& question) {
      ++calls_;
      StubAnswer answer;
      if (question.name == "allowed.test") {
        answer.addresses = {V4(192, 0, 2, 1), V6(1)};
        answer.ttl = 42;
      } else if (question.name == "slow.test") {
        absl::SleepFor(absl::Seconds(1));
        answer.addresses = {V4(192, 0, 2, 2)};
      } else if (question.name == "blocked.test") {
        ++blocked_;
        release_.WaitForNotification();
        answer.addresses = {V4(192, 0, 2, 3)};
      } else if (question.name == "many.test") {
        for (int i = 0; i < 40; ++i) answer.addresses.push_back(V4(192, 0, 2, i));
      } else {
        answer.rcode = kDnsNxDomain;
      }
      return answer;
    };
  }

  // Waits until `count` answerer calls are blocked on release_.
  bool WaitBlocked(int count) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (blocked_.load() < count) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  std::atomic<int> calls_{0};
  std::atomic<int> blocked_{0};
  absl::Notification release_;
};

DnsResponse Parsed(const std::optional<std::vector<uint8_t>>& reply) {
  EXPECT_TRUE(reply.has_value()) << "no reply";
  if (!reply.has_value()) return {};
  absl::StatusOr<DnsResponse> response = ParseDnsResponse(*reply);
  EXPECT_TRUE(response.ok()) << response.status();
  return response.ok() ? *response : DnsResponse{};
}

// The header of a reply: id, flags.
uint16_t Id(const std::vector<uint8_t>& reply) { return reply[0] << 8 | reply[1]; }
uint8_t Rcode(const std::vector<uint8_t>& reply) { return reply[3] & 0xF; }

TEST_F(DnsStubTest, NamesOutsideThePolicyGetNxDomain) {
  StubHarness stub(Answerer());
  const DnsResponse response =
      Parsed(stub.Udp(BuildDnsQuery(0x1234, "exfil.evil.test", kDnsTypeA)));
  EXPECT_EQ(response.id, 0x1234);
  EXPECT_EQ(response.rcode, kDnsNxDomain);
  EXPECT_EQ(response.question.name, "exfil.evil.test");
  EXPECT_THAT(response.addresses, IsEmpty());
  EXPECT_EQ(calls_.load(), 1);
}

TEST_F(DnsStubTest, AnswersAAndAaaa) {
  StubHarness stub(Answerer());
  DnsResponse a = Parsed(stub.Udp(BuildDnsQuery(1, "allowed.test", kDnsTypeA)));
  EXPECT_EQ(a.rcode, kDnsNoError);
  EXPECT_THAT(a.addresses, ElementsAre(V4(192, 0, 2, 1)));
  EXPECT_EQ(a.min_ttl, 42u);
  DnsResponse aaaa = Parsed(stub.Udp(BuildDnsQuery(2, "allowed.test", kDnsTypeAaaa)));
  EXPECT_EQ(aaaa.rcode, kDnsNoError);
  EXPECT_THAT(aaaa.addresses, ElementsAre(V6(1)));
  // Other types of an allowed name: the answerer is asked, no records come back (NODATA).
  DnsResponse txt = Parsed(stub.Udp(BuildDnsQuery(3, "allowed.test", 16)));
  EXPECT_EQ(txt.rcode, kDnsNoError);
  EXPECT_THAT(txt.addresses, IsEmpty());
}

TEST_F(DnsStubTest, AnswersOverTcpSeveralQuestionsPerConnection) {
  StubHarness stub(Answerer());
  UniqueFd connection = stub.TcpConnect();
  DnsResponse a =
      Parsed(StubHarness::Tcp(connection.get(), BuildDnsQuery(7, "allowed.test", kDnsTypeA)));
  EXPECT_EQ(a.id, 7);
  EXPECT_THAT(a.addresses, ElementsAre(V4(192, 0, 2, 1)));
  DnsResponse nx =
      Parsed(StubHarness::Tcp(connection.get(), BuildDnsQuery(8, "nope.test", kDnsTypeA)));
  EXPECT_EQ(nx.id, 8);
  EXPECT_EQ(nx.rcode, kDnsNxDomain);
}

TEST_F(DnsStubTest, LongAnswersAreCutOverUdpAndWholeOverTcp) {
  StubHarness stub(Answerer());
  std::optional<std::vector<uint8_t>> udp = stub.Udp(BuildDnsQuery(5, "many.test", kDnsTypeA));
  ASSERT_TRUE(udp.has_value());
  EXPECT_LE(udp->size(), 512u);
  DnsResponse cut = Parsed(udp);
  EXPECT_TRUE(cut.truncated);
  UniqueFd connection = stub.TcpConnect();
  DnsResponse whole =
      Parsed(StubHarness::Tcp(connection.get(), BuildDnsQuery(6, "many.test", kDnsTypeA)));
  EXPECT_FALSE(whole.truncated);
  EXPECT_EQ(whole.addresses.size(), 40u);
}

TEST_F(DnsStubTest, MalformedQueriesGetFormErrWithoutReachingTheAnswerer) {
  StubHarness stub(Answerer());
  // A header claiming one question, followed by a label running past the end.
  std::vector<uint8_t> garbage = {0xAB, 0xCD, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 60, 'x', 'y'};
  std::optional<std::vector<uint8_t>> reply = stub.Udp(garbage);
  ASSERT_TRUE(reply.has_value());
  ASSERT_GE(reply->size(), 12u);
  EXPECT_EQ(Id(*reply), 0xABCD);
  EXPECT_EQ(Rcode(*reply), kDnsFormErr);
  EXPECT_NE(reply->at(2) & 0x80, 0);  // QR
  // A compression loop.
  std::vector<uint8_t> loop = {0, 9, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 12, 0, 1, 0, 1};
  reply = stub.Udp(loop);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(Rcode(*reply), kDnsFormErr);
  // Over TCP too.
  UniqueFd connection = stub.TcpConnect();
  reply = StubHarness::Tcp(connection.get(), garbage);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(Rcode(*reply), kDnsFormErr);
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(DnsStubTest, NoReplyToFragmentsOrResponses) {
  StubHarness stub(Answerer());
  EXPECT_FALSE(stub.Udp({1, 2, 3, 4, 5}, absl::Milliseconds(300)).has_value());
  DnsQuery query;
  query.id = 3;
  query.question = {"allowed.test", kDnsTypeA, kDnsClassIn};
  // Answering a response could make two servers bounce packets forever.
  EXPECT_FALSE(
      stub.Udp(BuildDnsResponse(query, kDnsNoError, {}, 1), absl::Milliseconds(300)).has_value());
  // The stub still works afterwards.
  EXPECT_EQ(Parsed(stub.Udp(BuildDnsQuery(4, "allowed.test", kDnsTypeA))).rcode, kDnsNoError);
  EXPECT_EQ(calls_.load(), 1);
}

TEST_F(DnsStubTest, OtherOpcodesAndClassesAreRefused) {
  StubHarness stub(Answerer());
  std::vector<uint8_t> notify = BuildDnsQuery(11, "allowed.test", kDnsTypeA);
  notify[2] = 4 << 3;  // opcode NOTIFY
  std::optional<std::vector<uint8_t>> reply = stub.Udp(notify);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(Id(*reply), 11);
  EXPECT_EQ(Rcode(*reply), kDnsNotImp);

  std::vector<uint8_t> chaos = BuildDnsQuery(12, "version.bind", 16);
  chaos[chaos.size() - 1] = 3;  // class CH
  reply = stub.Udp(chaos);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(Rcode(*reply), kDnsRefused);
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(DnsStubTest, SlowQuestionsDoNotStallFastOnes) {
  StubHarness stub(Answerer());
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 5; ++i) {
    slow.push_back(stub.UdpSend(BuildDnsQuery(100 + i, "slow.test", kDnsTypeA)));
  }
  absl::SleepFor(absl::Milliseconds(50));  // the slow ones are with the answerer
  const absl::Time start = absl::Now();
  DnsResponse fast = Parsed(stub.Udp(BuildDnsQuery(1, "allowed.test", kDnsTypeA)));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_THAT(fast.addresses, ElementsAre(V4(192, 0, 2, 1)));
  // The slow ones all finish in about one second, not five: they ran at once.
  for (UniqueFd& fd : slow) {
    DnsResponse response = Parsed(StubHarness::UdpReceive(fd.get(), absl::Seconds(3)));
    EXPECT_THAT(response.addresses, ElementsAre(V4(192, 0, 2, 2)));
  }
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1900));
}

TEST_F(DnsStubTest, ManyConcurrentQueriesAllGetAnswers) {
  StubHarness stub(Answerer());
  std::vector<UniqueFd> fds;
  for (int i = 0; i < 200; ++i) {
    fds.push_back(stub.UdpSend(
        BuildDnsQuery(static_cast<uint16_t>(i), i % 2 ? "allowed.test" : "x.test", kDnsTypeA)));
  }
  for (int i = 0; i < 200; ++i) {
    DnsResponse response = Parsed(StubHarness::UdpReceive(fds[i].get(), absl::Seconds(5)));
    EXPECT_EQ(response.id, i);
    EXPECT_EQ(response.rcode, i % 2 ? kDnsNoError : kDnsNxDomain);
  }
  EXPECT_EQ(calls_.load(), 200);
}

TEST_F(DnsStubTest, WhenEverySlotIsTakenQueriesWaitInsteadOfFailing) {
  StubHarness stub(Answerer());
  std::vector<UniqueFd> blocked;
  for (int i = 0; i < DnsStub::kMaxInFlight; ++i) {
    blocked.push_back(stub.UdpSend(BuildDnsQuery(200 + i, "blocked.test", kDnsTypeA)));
  }
  ASSERT_TRUE(WaitBlocked(DnsStub::kMaxInFlight));
  UniqueFd waiting = stub.UdpSend(BuildDnsQuery(1, "allowed.test", kDnsTypeA));
  // Neither answered nor refused while the answerer is busy ...
  EXPECT_FALSE(StubHarness::UdpReceive(waiting.get(), absl::Milliseconds(300)).has_value());
  EXPECT_EQ(calls_.load(), DnsStub::kMaxInFlight);
  release_.Notify();
  // ... and answered once a slot frees up.
  DnsResponse response = Parsed(StubHarness::UdpReceive(waiting.get(), absl::Seconds(3)));
  EXPECT_EQ(response.rcode, kDnsNoError);
  EXPECT_THAT(response.addresses, ElementsAre(V4(192, 0, 2, 1)));
  for (UniqueFd& fd : blocked) {
    EXPECT_THAT(Parsed(StubHarness::UdpReceive(fd.get(), absl::Seconds(3))).addresses,
                ElementsAre(V4(192, 0, 2, 3)));
  }
}

TEST_F(DnsStubTest, StopEndsServePromptlyWithIdleConnections) {
  StubHarness stub(Answerer());
  UniqueFd idle = stub.TcpConnect();
  UniqueFd half = stub.TcpConnect();
  const uint8_t partial[] = {0, 40, 1, 2};  // a length, then only part of the message
  ASSERT_EQ(send(half.get(), partial, sizeof(partial), 0), 4);
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  stub.Stop();
  ASSERT_TRUE(stub.WaitReturned(absl::Seconds(3)));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  // The connections were closed.
  EXPECT_TRUE(Readable(idle.get(), absl::Seconds(1)));
  char byte;
  EXPECT_EQ(recv(idle.get(), &byte, 1, 0), 0);
}

TEST_F(DnsStubTest, ServeWaitsForQuestionsWithTheAnswerer) {
  StubHarness stub(Answerer());
  UniqueFd fd = stub.UdpSend(BuildDnsQuery(9, "blocked.test", kDnsTypeA));
  ASSERT_TRUE(WaitBlocked(1));
  stub.Stop();
  EXPECT_FALSE(stub.WaitReturned(absl::Milliseconds(300)));
  release_.Notify();
  EXPECT_TRUE(stub.WaitReturned(absl::Seconds(3)));
  // The question in flight was still answered.
  EXPECT_THAT(Parsed(StubHarness::UdpReceive(fd.get(), absl::Seconds(1))).addresses,
              ElementsAre(V4(192, 0, 2, 3)));
}

TEST_F(DnsStubTest, ConnectionsOverTheCapAreClosed) {
  StubHarness stub(Answerer());
  std::vector<UniqueFd> open;
  for (int i = 0; i < DnsStub::kMaxTcpConnections; ++i) {
    open.push_back(stub.TcpConnect());
    // One exchange each, so the stub has surely accepted it before the next.
    ASSERT_TRUE(StubHarness::Tcp(open.back().get(), BuildDnsQuery(1, "x.test", kDnsTypeA)));
  }
  UniqueFd extra = stub.TcpConnect();
  ASSERT_TRUE(Readable(extra.get(), absl::Seconds(2)));
  char byte;
  EXPECT_EQ(recv(extra.get(), &byte, 1, 0), 0);  // closed at once, no answer
  // The others still work.
  EXPECT_EQ(Rcode(*StubHarness::Tcp(open[0].get(), BuildDnsQuery(2, "x.test", kDnsTypeA))),
            kDnsNxDomain);
  // When one closes, a new connection is served.
  open.pop_back();
  absl::SleepFor(absl::Milliseconds(100));
  UniqueFd later = stub.TcpConnect();
  std::optional<std::vector<uint8_t>> reply =
      StubHarness::Tcp(later.get(), BuildDnsQuery(3, "allowed.test", kDnsTypeA));
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(Rcode(*reply), kDnsNoError);
}

TEST_F(DnsStubTest, SilentTcpClientsAreDisconnected) {
  StubHarness stub(Answerer());
  UniqueFd silent = stub.TcpConnect();
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Readable(silent.get(), absl::Seconds(DnsStub::kTcpReadTimeoutSeconds + 3)));
  char byte;
  EXPECT_EQ(recv(silent.get(), &byte, 1, 0), 0);
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Seconds(DnsStub::kTcpReadTimeoutSeconds) - absl::Milliseconds(100));
  EXPECT_LT(waited, absl::Seconds(DnsStub::kTcpReadTimeoutSeconds + 2));
}

}  // namespace
}  // namespace moat::egress
