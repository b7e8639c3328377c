#include "sandbox/egress/resolver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
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
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

void Put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void PutName(std::vector<uint8_t>& out, absl::string_view name) {
  for (absl::string_view label : absl::StrSplit(name, '.', absl::SkipEmpty())) {
    out.push_back(static_cast<uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
  }
  out.push_back(0);
}

void PutRecord(std::vector<uint8_t>& out, absl::string_view owner, uint16_t type,
               const std::vector<uint8_t>& data) {
  PutName(out, owner);
  Put16(out, type);
  Put16(out, kDnsClassIn);
  Put16(out, 0);
  Put16(out, 60);
  Put16(out, static_cast<uint16_t>(data.size()));
  out.insert(out.end(), data.begin(), data.end());
}

// How the fake server misbehaves.
struct FakeBehavior {
  std::map<std::string, std::vector<IpAddress>> records;  // lower-case name -> addresses
  std::map<std::string, std::string> cnames;              // lower-case name -> target
  bool silent = false;                                    // reads queries, never answers
  bool truncate_udp = false;    // UDP answers: TC set, a bogus address, full answer over TCP only
  bool wrong_id_first = false;  // before each UDP answer, one with another id and a bogus address
  bool wrong_question_first = false;  // ... or with another question
  std::optional<uint8_t> rcode;       // answers every question with this rcode, no records
};

const IpAddress kBogus = V4(127, 66, 66, 66);

// A DNS server on 127.0.0.1 (UDP and TCP on the same ephemeral port) that counts what it gets.
class FakeDnsServer {
 public:
  explicit FakeDnsServer(FakeBehavior behavior) : behavior_(std::move(behavior)) {
    for (int attempt = 0; attempt < 50 && !tcp_; ++attempt) {
      udp_ = UniqueFd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t length = sizeof(address);
      if (bind(udp_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) continue;
      getsockname(udp_.get(), reinterpret_cast<sockaddr*>(&address), &length);
      port_ = ntohs(address.sin_port);
      UniqueFd tcp(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const int one = 1;
      setsockopt(tcp.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (bind(tcp.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
          listen(tcp.get(), 16) == 0) {
        tcp_ = std::move(tcp);
      }
    }
    EXPECT_TRUE(tcp_.valid()) << "could not bind UDP and TCP on one loopback port";
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    stop_read_ = UniqueFd(fds[0]);
    stop_write_ = UniqueFd(fds[1]);
    thread_ = std::thread([this] { Run(); });
  }

  ~FakeDnsServer() {
    stop_write_.reset();  // the read end sees end of file
    thread_.join();
  }

  DnsServer server() const {
    DnsServer server;
    server.address = V4(127, 0, 0, 1);
    server.port = port_;
    return server;
  }

  int udp_queries() const {
    absl::MutexLock lock(&mu_);
    return udp_queries_;
  }
  int tcp_queries() const {
    absl::MutexLock lock(&mu_);
    return tcp_queries_;
  }
  std::vector<std::pair<uint16_t, uint16_t>> udp_sources_and_ids() const {
    absl::MutexLock lock(&mu_);
    return sources_and_ids_;
  }

 private:
  std::vector<uint8_t> Respond(const DnsQuery& query, bool over_udp) const {
    std::vector<uint8_t> out;
    const std::string name = absl::AsciiStrToLower(query.question.name);
    std::vector<std::pair<std::string, std::string>> chain;  // owner, target
    std::string target = name;
    while (behavior_.cnames.count(target)) {
      chain.emplace_back(target, behavior_.cnames.at(target));
      target = behavior_.cnames.at(target);
    }
    const auto found = behavior_.records.find(target);
    uint8_t rcode = kDnsNoError;
    if (found == behavior_.records.end() && chain.empty()) rcode = kDnsNxDomain;
    if (behavior_.rcode) rcode = *behavior_.rcode;
    const bool truncated = over_udp && behavior_.truncate_udp;

    std::vector<std::vector<uint8_t>> answers;
    auto add = [&](absl::string_view owner, uint16_t type, std::vector<uint8_t> data) {
      std::vector<uint8_t> record;
      PutRecord(record, owner, type, data);
      answers.push_back(std::move(record));
    };
    if (truncated) {
      add(name, kDnsTypeA, {127, 66, 66, 66});
    } else if (!behavior_.rcode) {
      for (const auto& [owner, to] : chain) {
        std::vector<uint8_t> data;
        PutName(data, to);
        add(owner, kDnsTypeCname, data);
      }
      if (found != behavior_.records.end()) {
        for (const IpAddress& address : found->second) {
          if (address.is_v4() && query.question.type == kDnsTypeA) {
            const uint32_t v = address.v4();
            add(target, kDnsTypeA,
                {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)});
          } else if (!address.is_v4() && query.question.type == kDnsTypeAaaa) {
            add(target, kDnsTypeAaaa, {address.v6().begin(), address.v6().end()});
          }
        }
      }
    }
    Put16(out, query.id);
    Put16(out, static_cast<uint16_t>(0x8180 | (truncated ? 0x0200 : 0) | rcode));
    Put16(out, 1);
    Put16(out, static_cast<uint16_t>(answers.size()));
    Put16(out, 0);
    Put16(out, 0);
    PutName(out, query.question.name);
    Put16(out, query.question.type);
    Put16(out, query.question.klass);
    for (const auto& answer : answers) out.insert(out.end(), answer.begin(), answer.end());
    return out;
  }

  // A response to `query` as a spoofer would send it, claiming kBogus.
  std::vector<uint8_t> Spoof(DnsQuery query) const {
    if (behavior_.wrong_id_first) query.id ^= 0x5A5A;
    if (behavior_.wrong_question_first) query.question.name = "other.test";
    return BuildDnsResponse(query, kDnsNoError, {kBogus}, 60);
  }

  void ServeUdp() {
    uint8_t buffer[4096];
    sockaddr_in peer{};
    socklen_t peer_length = sizeof(peer);
    const ssize_t n = recvfrom(udp_.get(), buffer, sizeof(buffer), 0,
                               reinterpret_cast<sockaddr*>(&peer), &peer_length);
    if (n < 0) return;
    absl::StatusOr<DnsQuery> query = ParseDnsQuery(absl::MakeConstSpan(buffer, n));
    {
      absl::MutexLock lock(&mu_);
      ++udp_queries_;
      if (query.ok()) sources_and_ids_.emplace_back(ntohs(peer.sin_port), query->id);
    }
    if (!query.ok() || behavior_.silent) return;
    auto send = [&](const std::vector<uint8_t>& message) {
      sendto(udp_.get(), message.data(), message.size(), 0, reinterpret_cast<sockaddr*>(&peer),
             peer_length);
    };
    if (behavior_.wrong_id_first || behavior_.wrong_question_first) send(Spoof(*query));
    send(Respond(*query, /*over_udp=*/true));
  }

  void ServeTcp() {
    UniqueFd connection(accept4(tcp_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection) return;
    timeval timeout = {2, 0};
    setsockopt(connection.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    uint8_t length[2];
    if (recv(connection.get(), length, 2, MSG_WAITALL) != 2) return;
    std::vector<uint8_t> message(length[0] << 8 | length[1]);
    if (recv(connection.get(), message.data(), message.size(), MSG_WAITALL) !=
        static_cast<ssize_t>(message.size())) {
      return;
    }
    absl::StatusOr<DnsQuery> query = ParseDnsQuery(message);
    {
      absl::MutexLock lock(&mu_);
      ++tcp_queries_;
    }
    if (!query.ok() || behavior_.silent) return;
    std::vector<uint8_t> response = Respond(*query, /*over_udp=*/false);
    std::vector<uint8_t> framed;
    Put16(framed, static_cast<uint16_t>(response.size()));
    framed.insert(framed.end(), response.begin(), response.end());
    send(connection.get(), framed.data(), framed.size(), MSG_NOSIGNAL);
  }

  void Run() {
    for (;;) {
      pollfd entries[3] = {
          {stop_read_.get(), POLLIN, 0}, {udp_.get(), POLLIN, 0}, {tcp_.get(), POLLIN, 0}};
      if (poll(entries, 3, -1) < 0) continue;
      if (entries[0].revents) return;
      if (entries[1].revents) ServeUdp();
      if (entries[2].revents) ServeTcp();
    }
  }

  const FakeBehavior behavior_;
  UniqueFd udp_;
  UniqueFd tcp_;
  uint16_t port_ = 0;
  UniqueFd stop_read_;
  UniqueFd stop_write_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  int udp_queries_ ABSL_GUARDED_BY(mu_) = 0;
  int tcp_queries_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<uint16_t, uint16_t>> sources_and_ids_ ABSL_GUARDED_BY(mu_);
};

FakeBehavior Normal() {
  FakeBehavior behavior;
  behavior.records["pypi.test"] = {V4(192, 0, 2, 10), V4(192, 0, 2, 11), V6(10)};
  behavior.records["v4only.test"] = {V4(192, 0, 2, 20)};
  behavior.records["empty.test"] = {};
  behavior.cnames["www.pypi.test"] = "edge.cdn.test";
  behavior.cnames["edge.cdn.test"] = "pypi.test";
  return behavior;
}

std::unique_ptr<DnsResolver> MakeResolver(std::vector<DnsServer> servers,
                                          absl::Duration timeout = absl::Seconds(2),
                                          int attempts = 2) {
  DnsResolverOptions options;
  options.timeout = timeout;
  options.attempts = attempts;
  absl::StatusOr<std::unique_ptr<DnsResolver>> resolver =
      DnsResolver::Create(std::move(servers), options);
  EXPECT_TRUE(resolver.ok()) << resolver.status();
  return resolver.ok() ? std::move(*resolver) : nullptr;
}

// A loopback port where nothing listens (bound, then released).
uint16_t ClosedPort() {
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

TEST(DnsServerTest, ParsesEveryForm) {
  struct Case {
    const char* text;
    const char* printed;
  };
  for (const Case& c :
       {Case{"192.0.2.53", "192.0.2.53:53"}, Case{"127.0.0.1:5353", "127.0.0.1:5353"},
        Case{"::1", "[::1]:53"}, Case{"[::1]:5353", "[::1]:5353"},
        Case{"[2001:db8::1]", "[2001:db8::1]:53"}, Case{" 10.0.0.1 ", "10.0.0.1:53"}}) {
    absl::StatusOr<DnsServer> server = ParseDnsServer(c.text);
    ASSERT_TRUE(server.ok()) << c.text << ": " << server.status();
    EXPECT_EQ(server->ToString(), c.printed);
  }
}

TEST(DnsServerTest, RefusesWhatIsNotAnAddressAndPort) {
  for (const char* text :
       {"", "dns.google", "1.1.1.1:0", "1.1.1.1:65536", "1.1.1.1:+53", "1.1.1.1:", "[::1",
        "[::1]53", "[::1]:x", "1.1.1", "::1]:53", "1.1.1.1:53:53", "[dns.google]:53"}) {
    absl::StatusOr<DnsServer> server = ParseDnsServer(text);
    EXPECT_FALSE(server.ok()) << text;
    if (!server.ok()) EXPECT_THAT(server.status().message(), HasSubstr("DNS server")) << text;
  }
}

TEST(ResolvConfTest, TakesTheNameserverLinesInOrder) {
  const std::vector<DnsServer> servers = ParseResolvConf(
      "# generated\n"
      "search example.com\n"
      "nameserver 192.0.2.1\n"
      "options ndots:2\n"
      "nameserver\t2001:db8::53   # trailing comment\n"
      "nameserver fe80::1%eth0\n"
      "nameserver not-an-address\n"
      "; nameserver 192.0.2.99\n"
      "nameserver\n"
      "nameservers 192.0.2.98\n"
      "nameserver 192.0.2.2\r\n");
  std::vector<std::string> printed;
  for (const DnsServer& server : servers) printed.push_back(server.ToString());
  EXPECT_THAT(printed, ElementsAre("192.0.2.1:53", "[2001:db8::53]:53", "192.0.2.2:53"));
}

TEST(ResolvConfTest, HostServersMatchTheFile) {
  std::ifstream file("/etc/resolv.conf");
  std::stringstream text;
  text << file.rdbuf();
  const std::vector<DnsServer> expected = ParseResolvConf(text.str());
  absl::StatusOr<std::vector<DnsServer>> servers = HostDnsServers();
  if (expected.empty()) {
    ASSERT_FALSE(servers.ok());
    EXPECT_THAT(servers.status().message(), HasSubstr("\"/etc/resolv.conf\""));
  } else {
    ASSERT_TRUE(servers.ok()) << servers.status();
    EXPECT_EQ(*servers, expected);
  }
}

TEST(DnsResolverTest, CreateRefusesBadSettings) {
  EXPECT_FALSE(DnsResolver::Create({}).ok());
  DnsServer server;
  server.address = V4(127, 0, 0, 1);
  DnsResolverOptions no_time;
  no_time.timeout = absl::ZeroDuration();
  EXPECT_FALSE(DnsResolver::Create({server}, no_time).ok());
  DnsResolverOptions no_attempts;
  no_attempts.attempts = 0;
  EXPECT_FALSE(DnsResolver::Create({server}, no_attempts).ok());
}

TEST(DnsResolverTest, ReturnsAAndAaaaAddresses) {
  FakeDnsServer fake(Normal());
  auto resolver = MakeResolver({fake.server()});
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("pypi.test");
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, UnorderedElementsAre(V4(192, 0, 2, 10), V4(192, 0, 2, 11), V6(10)));
  EXPECT_EQ(fake.udp_queries(), 2);  // one A, one AAAA
  EXPECT_EQ(fake.tcp_queries(), 0);
}

TEST(DnsResolverTest, TrailingDotAndCaseDoNotMatter) {
  FakeDnsServer fake(Normal());
  auto resolver = MakeResolver({fake.server()});
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("V4ONLY.test.");
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, ElementsAre(V4(192, 0, 2, 20)));
}

TEST(DnsResolverTest, FollowsCnameChains) {
  FakeDnsServer fake(Normal());
  auto resolver = MakeResolver({fake.server()});
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("www.pypi.test");
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, UnorderedElementsAre(V4(192, 0, 2, 10), V4(192, 0, 2, 11), V6(10)));
}

TEST(DnsResolverTest, NxDomainIsNotFoundAndAsksNoOtherServer) {
  FakeDnsServer first(Normal());
  FakeDnsServer second(Normal());
  auto resolver = MakeResolver({first.server(), second.server()});
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("missing.test");
  ASSERT_TRUE(absl::IsNotFound(addresses.status())) << addresses.status();
  EXPECT_THAT(addresses.status().message(), HasSubstr("NXDOMAIN"));
  EXPECT_EQ(first.udp_queries(), 2);
  EXPECT_EQ(second.udp_queries(), 0);
}

TEST(DnsResolverTest, NoAddressRecordsIsNotFound) {
  FakeDnsServer fake(Normal());
  auto resolver = MakeResolver({fake.server()});
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("empty.test");
  ASSERT_TRUE(absl::IsNotFound(addresses.status())) << addresses.status();
  EXPECT_THAT(addresses.status().message(), HasSubstr("no A or AAAA records"));
}

TEST(DnsResolverTest, TruncatedAnswersAreAskedAgainOverTcp) {
  FakeBehavior behavior = Normal();
  behavior.truncate_udp = true;
  FakeDnsServer fake(behavior);
  auto resolver = MakeResolver({fake.server()});
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("pypi.test");
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  // The bogus address of the truncated UDP answers is not used.
  EXPECT_THAT(*addresses, UnorderedElementsAre(V4(192, 0, 2, 10), V4(192, 0, 2, 11), V6(10)));
  EXPECT_EQ(fake.udp_queries(), 2);
  EXPECT_EQ(fake.tcp_queries(), 2);
}

TEST(DnsResolverTest, SilentServerTimesOutAndTheNextOneAnswers) {
  FakeBehavior silent;
  silent.silent = true;
  FakeDnsServer dead(silent);
  FakeDnsServer alive(Normal());
  auto resolver = MakeResolver({dead.server(), alive.server()}, absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("v4only.test");
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, ElementsAre(V4(192, 0, 2, 20)));
  EXPECT_EQ(dead.udp_queries(), 2);
  EXPECT_EQ(alive.udp_queries(), 2);
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(DnsResolverTest, NoAnswerAnywhereIsUnavailableNamingTheServers) {
  FakeBehavior silent;
  silent.silent = true;
  FakeDnsServer one(silent);
  FakeDnsServer two(silent);
  auto resolver = MakeResolver({one.server(), two.server()}, absl::Milliseconds(100), 2);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("pypi.test");
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(absl::IsUnavailable(addresses.status())) << addresses.status();
  EXPECT_THAT(addresses.status().message(), HasSubstr(one.server().ToString()));
  EXPECT_THAT(addresses.status().message(), HasSubstr(two.server().ToString()));
  EXPECT_THAT(addresses.status().message(), HasSubstr("pypi.test"));
  // Two rounds over two servers, A and AAAA each time; both questions share one timeout.
  EXPECT_EQ(one.udp_queries(), 4);
  EXPECT_EQ(two.udp_queries(), 4);
  EXPECT_GE(took, absl::Milliseconds(390));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(DnsResolverTest, ClosedPortFailsOverWithoutWaiting) {
  FakeDnsServer alive(Normal());
  DnsServer closed;
  closed.address = V4(127, 0, 0, 1);
  closed.port = ClosedPort();
  auto resolver = MakeResolver({closed, alive.server()}, absl::Seconds(5));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("v4only.test");
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  // The ICMP port unreachable ends the attempt; no 5 s timeout.
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// One server that first sends a stray answer (`stray` set in its behaviour), then the real one:
// the resolver must skip the stray answer and return the real address.
void ExpectTheStrayAnswerIgnored(bool FakeBehavior::*stray) {
  FakeBehavior behavior = Normal();
  behavior.*stray = true;
  FakeDnsServer fake(behavior);
  auto resolver = MakeResolver({fake.server()});
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("v4only.test");
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, ElementsAre(V4(192, 0, 2, 20)));
}

TEST(DnsResolverTest, AnswersWithTheWrongIdAreIgnored) {
  ExpectTheStrayAnswerIgnored(&FakeBehavior::wrong_id_first);
}

TEST(DnsResolverTest, AnswersToAnotherQuestionAreIgnored) {
  ExpectTheStrayAnswerIgnored(&FakeBehavior::wrong_question_first);
}

TEST(DnsResolverTest, ServfailMovesOnToTheNextServer) {
  FakeBehavior failing = Normal();
  failing.rcode = kDnsServFail;
  FakeDnsServer broken(failing);
  FakeDnsServer alive(Normal());
  auto resolver = MakeResolver({broken.server(), alive.server()});
  absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve("v4only.test");
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, ElementsAre(V4(192, 0, 2, 20)));
  EXPECT_EQ(broken.udp_queries(), 2);
}

TEST(DnsResolverTest, IdsAndSourcePortsVary) {
  FakeDnsServer fake(Normal());
  auto resolver = MakeResolver({fake.server()});
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(resolver->Resolve("v4only.test").ok());
  std::set<uint16_t> ports;
  std::set<uint16_t> ids;
  for (const auto& [port, id] : fake.udp_sources_and_ids()) {
    ports.insert(port);
    ids.insert(id);
  }
  // 20 queries: sequential ports or a fixed id would show here (collisions of random 16-bit
  // values are rare enough that a handful is the worst realistic case).
  EXPECT_GE(ports.size(), 15u);
  EXPECT_GE(ids.size(), 15u);
}

TEST(DnsResolverTest, RefusesMalformedNames) {
  DnsServer server;
  server.address = V4(127, 0, 0, 1);
  server.port = ClosedPort();
  auto resolver = MakeResolver({server});
  const std::vector<std::string> names = {
      "", ".", "a..b", "x.", std::string(64, 'a'), std::string(254, 'a')};
  for (const std::string& name : names) {
    absl::StatusOr<std::vector<IpAddress>> addresses = resolver->Resolve(name);
    if (name == "x.") {  // valid: the closed port makes it Unavailable
      EXPECT_FALSE(absl::IsInvalidArgument(addresses.status())) << name;
    } else {
      EXPECT_TRUE(absl::IsInvalidArgument(addresses.status())) << name << addresses.status();
    }
  }
}

TEST(DnsResolverTest, IsSafeToShareBetweenThreads) {
  FakeDnsServer fake(Normal());
  auto resolver = MakeResolver({fake.server()});
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const bool even = (t + i) % 2 == 0;
        absl::StatusOr<std::vector<IpAddress>> addresses =
            resolver->Resolve(even ? "v4only.test" : "www.pypi.test");
        if (addresses.ok() && addresses->size() == (even ? 1u : 3u)) ++good;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(good.load(), 80);
  EXPECT_EQ(fake.udp_queries(), 160);
}

}  // namespace
}  // namespace moat::egress
