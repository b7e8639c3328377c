// The proxy end to end on loopback: a local origin server, a fake resolver, and clients that
// speak HTTP proxy, SOCKS5 and plain TCP to it.
#include "sandbox/egress/proxy.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/egress/sha256.h"
#include "sandbox/testing/fake_resolver.h"
#include "sandbox/testing/loopback_origin.h"
#include "sandbox/testing/read_to_eof.h"

namespace moat::egress {
namespace {

using ::moat::sandbox::testing::ReadToEof;

using ::testing::HasSubstr;
using testing::ListenTcp;
using testing::LoopbackOrigin;
using ::testing::Not;
using ::testing::StartsWith;

// Records are written as requests end, which need not be the order they were sent in: tests look
// them up by host. Fails the test (and returns an empty record) when there is none.
AuditRecord Find(const std::vector<AuditRecord>& records, absl::string_view host) {
  for (const AuditRecord& r : records) {
    if (r.host == host) return r;
  }
  ADD_FAILURE() << "no audit record for " << host;
  return {};
}

class RecordingSink : public AuditSink {
 public:
  void Record(const AuditRecord& record) override {
    absl::MutexLock lock(&mu_);
    records_.push_back(record);
  }
  // The records once there are at least `n` (or after 5 s, whatever there is).
  std::vector<AuditRecord> WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return records_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(5));
    return records_;
  }
  // Waits for exactly one record and checks no second one follows.
  AuditRecord Only() {
    std::vector<AuditRecord> records = WaitFor(1);
    EXPECT_EQ(records.size(), 1u);
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(WaitFor(1).size(), 1u);
    return records.empty() ? AuditRecord{} : records[0];
  }

 private:
  absl::Mutex mu_;
  std::vector<AuditRecord> records_ ABSL_GUARDED_BY(mu_);
};

UniqueFd Connect(uint16_t port, const char* address = "127.0.0.1") {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, address, &addr.sin_addr);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  struct timeval tv = {5, 0};  // no test waits forever on a proxy that misbehaves
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void Send(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << "send failed";
    data.remove_prefix(n);
  }
}

// Exactly `n` bytes (fewer if the peer closes or 5 s pass).
std::string ReadN(int fd, size_t n) {
  std::string out;
  char buf[4096];
  while (out.size() < n) {
    const ssize_t got = ::read(fd, buf, std::min(sizeof(buf), n - out.size()));
    if (got <= 0) break;
    out.append(buf, got);
  }
  return out;
}

std::string ReadHead(int fd) {
  std::string out;
  char c;
  while (out.find("\r\n\r\n") == std::string::npos && ::read(fd, &c, 1) == 1) out.push_back(c);
  return out;
}

int StatusOf(absl::string_view response) {
  int status = 0;
  if (response.size() < 12 || !absl::SimpleAtoi(response.substr(9, 3), &status)) return -1;
  return status;
}

std::string Socks(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

std::string SocksDomainRequest(absl::string_view host, uint16_t port, int command = 1) {
  return Socks({5, command, 0, 3, static_cast<int>(host.size())}) + std::string(host) +
         Socks({port >> 8, port & 0xff});
}

size_t CountEntries(const char* dir) {
  size_t n = 0;
  DIR* d = ::opendir(dir);
  while (struct dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - (std::string(dir) == "/proc/self/fd");  // opendir's own descriptor
}

// Waits up to 5 s for `count()` to reach `want`; returns the last value.
size_t Settle(const std::function<size_t()>& count, size_t want) {
  size_t now = count();
  for (int i = 0; i < 500 && now != want; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    now = count();
  }
  return now;
}

class ProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    resolver_.Set("origin.test", {"127.0.0.1"});
    config_.sandbox_id = "sb-test";
    config_.max_request_body_bytes = 1024;
  }
  void TearDown() override {
    if (proxy_) proxy_->Stop();
  }

  void StartProxy(const std::vector<std::string>& allowed,
                  const std::vector<std::string>& denied = {}, bool loopback_allowed = true) {
    absl::StatusOr<EgressRules> rules = EgressRules::Parse(allowed, denied);
    ASSERT_TRUE(rules.ok()) << rules.status();
    std::vector<Cidr> cidrs;
    if (loopback_allowed) cidrs.push_back(*Cidr::Parse("127.0.0.0/8"));
    proxy_ = std::make_unique<EgressProxy>(config_, *std::move(rules),
                                           AddressPolicy(std::move(cidrs), {}), &resolver_, &sink_);
    proxy_->AddHttpListener(ListenTcp("127.0.0.1", 0, &http_port_));
    ASSERT_TRUE(proxy_->Start().ok());
    proxy_->AddSocksListener(ListenTcp("127.0.0.1", 0, &socks_port_));  // after Start works too
  }

  // One HTTP request through the proxy, the whole response.
  std::string Http(absl::string_view request) {
    UniqueFd client = Connect(http_port_);
    Send(client.get(), request);
    return ReadToEof(client.get());
  }

  std::string Get(absl::string_view host_port, absl::string_view path = "/") {
    return Http(
        absl::StrCat("GET http://", host_port, path, " HTTP/1.1\r\nHost: ", host_port, "\r\n\r\n"));
  }

  std::string OriginAuthority() { return absl::StrCat("origin.test:", origin_.port()); }

  ProxyConfig config_;
  testing::FakeResolver resolver_;
  RecordingSink sink_;
  LoopbackOrigin origin_;
  std::unique_ptr<EgressProxy> proxy_;
  uint16_t http_port_ = 0;
  uint16_t socks_port_ = 0;
};

TEST_F(ProxyTest, ConnectTunnelReachesTheOrigin) {
  StartProxy({"origin.test"});
  UniqueFd client = Connect(http_port_);
  Send(client.get(), absl::StrCat("CONNECT ", OriginAuthority(),
                                  " HTTP/1.1\r\nHost: ", OriginAuthority(), "\r\n\r\n"));
  EXPECT_EQ(ReadHead(client.get()), "HTTP/1.1 200 Connection established\r\n\r\n");
  const std::string inner = "GET /in-tunnel HTTP/1.1\r\nHost: origin.test\r\n\r\n";
  Send(client.get(), inner);
  const std::string response = ReadToEof(client.get());
  EXPECT_THAT(response, HasSubstr("hello from the origin: GET /in-tunnel"));
  client.reset();

  const AuditRecord r = sink_.Only();
  EXPECT_EQ(r.sandbox, "sb-test");
  EXPECT_EQ(r.protocol, "connect");
  EXPECT_EQ(r.method, "CONNECT");
  EXPECT_EQ(r.host, "origin.test");
  EXPECT_EQ(r.port, origin_.port());
  EXPECT_EQ(r.address, "127.0.0.1");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(r.reason, StartsWith("allowed by \"origin.test\""));
  EXPECT_EQ(r.bytes_up, inner.size());
  EXPECT_EQ(r.bytes_down, response.size());
  Sha256 expected;
  expected.Update(inner);
  EXPECT_EQ(r.body_sha256, expected.HexPrefix());
}

TEST_F(ProxyTest, BytesSentBeforeTheGoAheadAreTunnelledToo) {
  StartProxy({"origin.test"});
  UniqueFd client = Connect(http_port_);
  Send(client.get(), absl::StrCat("CONNECT ", OriginAuthority(),
                                  " HTTP/1.1\r\n\r\nGET /eager HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(StatusOf(ReadHead(client.get())), 200);
  EXPECT_THAT(ReadToEof(client.get()), HasSubstr("GET /eager"));
}

TEST_F(ProxyTest, PlainHttpIsForwardedInOriginForm) {
  StartProxy({"origin.test"});
  const std::string response = Http(absl::StrCat(
      "POST http://", OriginAuthority(),
      "/submit?x=1 HTTP/1.1\r\nHost: ORIGIN.test.:", origin_.port(),
      "\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n"
      "Connection: keep-alive\r\nUser-Agent: proxy-test\r\nContent-Length: 5\r\n\r\nhello"));
  EXPECT_EQ(StatusOf(response), 200);
  EXPECT_THAT(response, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(response, HasSubstr("hello from the origin: POST /submit?x=1"));

  const std::vector<testing::SeenRequest> seen = origin_.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].head,
            absl::StrCat("POST /submit?x=1 HTTP/1.1\r\nHost: origin.test:", origin_.port(),
                         "\r\nUser-Agent: proxy-test\r\nContent-Length: 5\r\n"
                         "Connection: close\r\n\r\n"));
  EXPECT_EQ(seen[0].body, "hello");

  const AuditRecord r = sink_.Only();
  EXPECT_EQ(r.protocol, "http");
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.bytes_up, 5u);
  EXPECT_EQ(r.bytes_down, response.size());
  EXPECT_EQ(r.body_sha256, "2cf24dba5fb0a30e");  // SHA-256("hello")
}

TEST_F(ProxyTest, MissingHostIsFilledIn) {
  StartProxy({"origin.test"});
  const std::string response =
      Http(absl::StrCat("GET http://", OriginAuthority(), "/old HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(StatusOf(response), 200);
  ASSERT_EQ(origin_.requests().size(), 1u);
  EXPECT_THAT(origin_.requests()[0].head,
              StartsWith(absl::StrCat("GET /old HTTP/1.0\r\nHost: ", OriginAuthority(), "\r\n")));
}

TEST_F(ProxyTest, HostHeaderMustAgreeWithTheTarget) {
  resolver_.Set("other.test", {"127.0.0.1"});
  StartProxy({"origin.test", "other.test"});
  for (const std::string& host :
       {absl::StrCat("other.test:", origin_.port()), std::string("origin.test"),
        absl::StrCat("origin.test:", origin_.port(), "\r\nHost: origin.test")}) {
    const std::string response = Http(
        absl::StrCat("GET http://", OriginAuthority(), "/ HTTP/1.1\r\nHost: ", host, "\r\n\r\n"));
    EXPECT_EQ(StatusOf(response), 400) << host;
  }
  EXPECT_EQ(origin_.connections(), 0);
  EXPECT_EQ(resolver_.total_calls(), 0);
  EXPECT_EQ(sink_.WaitFor(3).size(), 3u);
}

TEST_F(ProxyTest, OriginFormRequestsToTheProxyAre400) {
  StartProxy({"origin.test"});
  const std::string response = Http("GET /admin HTTP/1.1\r\nHost: origin.test\r\n\r\n");
  EXPECT_EQ(StatusOf(response), 400);
  EXPECT_THAT(response, HasSubstr("absolute form"));
  EXPECT_EQ(StatusOf(Http("GET https://origin.test/ HTTP/1.1\r\n\r\n")), 400);
  EXPECT_EQ(StatusOf(Http("garbage\r\n\r\n")), 400);
  EXPECT_EQ(origin_.connections(), 0);
}

TEST_F(ProxyTest, DeniedDomainIs403AndAudited) {
  resolver_.Set("evil.test", {"127.0.0.1"});
  StartProxy({"origin.test"});
  const std::string response = Get(absl::StrCat("evil.test:", origin_.port()));
  EXPECT_EQ(StatusOf(response), 403);
  EXPECT_THAT(response, HasSubstr("not in allowedDomains"));
  EXPECT_EQ(resolver_.total_calls(), 0);
  EXPECT_EQ(origin_.connections(), 0);
  const AuditRecord r = sink_.Only();
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.host, "evil.test");
  EXPECT_EQ(r.address, "");
  EXPECT_THAT(r.reason, HasSubstr("not in allowedDomains"));
}

TEST_F(ProxyTest, DenyBeatsAllowAndWildcardsAndPortsApply) {
  for (const char* name : {"a.corp.test", "bad.corp.test", "corp.test", "port.test"}) {
    resolver_.Set(name, {"127.0.0.1"});
  }
  StartProxy({"*.corp.test", absl::StrCat("port.test:", origin_.port())}, {"bad.corp.test"});
  const std::string port = absl::StrCat(":", origin_.port());
  EXPECT_EQ(StatusOf(Get("a.corp.test" + port)), 200);
  EXPECT_EQ(StatusOf(Get("bad.corp.test" + port)), 403);
  EXPECT_EQ(StatusOf(Get("corp.test" + port)), 403);  // the wildcard is for subdomains only
  EXPECT_EQ(StatusOf(Get("port.test" + port)), 200);
  EXPECT_EQ(StatusOf(Get(absl::StrCat("port.test:", origin_.port() + 1))), 403);
  EXPECT_EQ(origin_.connections(), 2);
  const std::vector<AuditRecord> records = sink_.WaitFor(5);
  ASSERT_EQ(records.size(), 5u);
  // Records are written as requests end, which need not be the order they were sent in.
  EXPECT_THAT(Find(records, "bad.corp.test").reason,
              HasSubstr("deniedDomains entry \"bad.corp.test\""));
}

TEST_F(ProxyTest, HostsWithOddBytesAre400) {
  StartProxy({"origin.test"});
  const std::string port = absl::StrCat(":", origin_.port());
  for (const char* host : {"origin%2etest", "origin.test%00", "orig_in.test",
                           "origin.test@evil.test", "origin..test", "[fe80::1%25eth0]"}) {
    UniqueFd client = Connect(http_port_);
    Send(client.get(), absl::StrCat("CONNECT ", host, port, " HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(StatusOf(ReadToEof(client.get())), 400) << host;
  }
  // Control bytes and NUL never get past the request line.
  for (const std::string& host : {std::string("origin.test\x01", 12), std::string("o\0.test", 7)}) {
    UniqueFd client = Connect(http_port_);
    Send(client.get(), absl::StrCat("CONNECT ", host, port, " HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(StatusOf(ReadToEof(client.get())), 400);
  }
  EXPECT_EQ(resolver_.total_calls(), 0);
  EXPECT_EQ(origin_.connections(), 0);
  const std::vector<AuditRecord> records = sink_.WaitFor(8);
  ASSERT_EQ(records.size(), 8u);
  // An invalid host is recorded as sent.
  Find(records, absl::StrCat("origin%2etest:", origin_.port()));
  for (const AuditRecord& r : records) {
    EXPECT_EQ(r.status, 400);
    EXPECT_FALSE(r.allowed);
  }
}

TEST_F(ProxyTest, NumericSpellingsOfLoopbackAreRefusedUnlessAllowed) {
  StartProxy({"127.0.0.1"}, {}, /*loopback_allowed=*/false);
  const std::string port = absl::StrCat(":", origin_.port());
  for (const char* host : {"2130706433", "127.1", "0x7f.0.0.1", "0177.0.0.1", "[::ffff:127.0.0.1]",
                           "127.0.0.1", "127.0.0.1."}) {
    const std::string response = Get(host + port);
    EXPECT_EQ(StatusOf(response), 403) << host;
    EXPECT_THAT(response, HasSubstr("loopback")) << host;
  }
  EXPECT_EQ(origin_.connections(), 0);
  for (const AuditRecord& r : sink_.WaitFor(7)) EXPECT_EQ(r.host, "127.0.0.1");
}

TEST_F(ProxyTest, NumericSpellingsReachAnAllowedLoopback) {
  StartProxy({"127.0.0.1"});
  EXPECT_EQ(StatusOf(Get(absl::StrCat("0x7f.1:", origin_.port()))), 200);
}

TEST_F(ProxyTest, NamesResolvingToLoopbackOrMetadataAreRefused) {
  resolver_.Set("meta.test", {"169.254.169.254"});
  StartProxy({"origin.test", "meta.test"}, {}, /*loopback_allowed=*/false);
  std::string response = Get(OriginAuthority());
  EXPECT_EQ(StatusOf(response), 403);
  EXPECT_THAT(response, HasSubstr("address 127.0.0.1 is loopback"));
  response = Get("meta.test:80");
  EXPECT_EQ(StatusOf(response), 403);
  EXPECT_THAT(response, HasSubstr("169.254.169.254"));
  EXPECT_EQ(origin_.connections(), 0);
  const std::vector<AuditRecord> records = sink_.WaitFor(2);
  ASSERT_EQ(records.size(), 2u);
  const AuditRecord meta = Find(records, "meta.test");
  EXPECT_EQ(meta.address, "169.254.169.254");
  EXPECT_FALSE(meta.allowed);
}

TEST_F(ProxyTest, MetadataStaysRefusedWhenLoopbackIsAllowed) {
  resolver_.Set("meta.test", {"169.254.169.254"});
  StartProxy({"meta.test"});
  EXPECT_EQ(StatusOf(Get("meta.test:80")), 403);
}

TEST_F(ProxyTest, ResolvesOnceAndDialsTheAddressItChecked) {
  // A rebinding server: public-looking first, then the metadata address, then loopback.
  resolver_.SetSequence("rebind.test", {{"127.0.0.1"}, {"169.254.169.254"}});
  StartProxy({"rebind.test"});
  const std::string authority = absl::StrCat("rebind.test:", origin_.port());
  EXPECT_EQ(StatusOf(Get(authority)), 200);
  EXPECT_EQ(resolver_.calls("rebind.test"), 1);
  EXPECT_EQ(StatusOf(Get(authority)), 403);  // the second request sees the second answer
  EXPECT_EQ(resolver_.calls("rebind.test"), 2);

  // The other order: checked bad, and never looked up again to find a good one.
  resolver_.SetSequence("rebind2.test", {{"169.254.169.254"}, {"127.0.0.1"}});
  proxy_->Stop();
  StartProxy({"rebind2.test"});
  UniqueFd client = Connect(http_port_);
  Send(client.get(), absl::StrCat("CONNECT rebind2.test:", origin_.port(), " HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(StatusOf(ReadToEof(client.get())), 403);
  EXPECT_EQ(resolver_.calls("rebind2.test"), 1);
  EXPECT_EQ(origin_.connections(), 1);
}

TEST_F(ProxyTest, DialsTheFirstAddressThatPasses) {
  resolver_.Set("multi.test", {"169.254.169.254", "127.0.0.1"});
  StartProxy({"multi.test"});
  EXPECT_EQ(StatusOf(Get(absl::StrCat("multi.test:", origin_.port()))), 200);
  EXPECT_EQ(sink_.Only().address, "127.0.0.1");
}

TEST_F(ProxyTest, UnresolvableAndUnreachableAre502) {
  StartProxy({"origin.test", "nowhere.test"});
  std::string response = Get("nowhere.test:80");
  EXPECT_EQ(StatusOf(response), 502);
  EXPECT_THAT(response, HasSubstr("cannot resolve \"nowhere.test\""));
  uint16_t closed_port = 0;
  { ListenTcp("127.0.0.1", 0, &closed_port); }  // bound and closed again: nothing listens
  response = Get(absl::StrCat("origin.test:", closed_port));
  EXPECT_EQ(StatusOf(response), 502);
  EXPECT_THAT(response, HasSubstr("refused"));
  const std::vector<AuditRecord> records = sink_.WaitFor(2);
  ASSERT_EQ(records.size(), 2u);
  const AuditRecord closed = Find(records, "origin.test");
  EXPECT_EQ(closed.status, 502);
  EXPECT_TRUE(closed.allowed);  // the policy allowed it; the destination was not there
}

TEST_F(ProxyTest, OversizedBodiesAre413AndNeverReachTheOrigin) {
  StartProxy({"origin.test"});
  const std::string target =
      absl::StrCat("POST http://", OriginAuthority(), "/up HTTP/1.1\r\nHost: ", OriginAuthority());
  std::string response =
      Http(absl::StrCat(target, "\r\nContent-Length: 2000\r\n\r\n", std::string(2000, 'a')));
  EXPECT_EQ(StatusOf(response), 413);
  std::string chunked = absl::StrCat(target, "\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 3; ++i) absl::StrAppend(&chunked, "258\r\n", std::string(600, 'b'), "\r\n");
  absl::StrAppend(&chunked, "0\r\n\r\n");
  response = Http(chunked);
  EXPECT_EQ(StatusOf(response), 413);
  EXPECT_THAT(response, HasSubstr("maxRequestBodyBytes (1024 bytes)"));
  EXPECT_EQ(origin_.connections(), 0);
  // At the cap exactly, chunked: decoded and forwarded with a length.
  response = Http(absl::StrCat(target, "\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n",
                               std::string(1024, 'c'), "\r\n0\r\n\r\n"));
  EXPECT_EQ(StatusOf(response), 200);
  ASSERT_EQ(origin_.requests().size(), 1u);
  EXPECT_EQ(origin_.requests()[0].body, std::string(1024, 'c'));
  EXPECT_THAT(origin_.requests()[0].head, HasSubstr("Content-Length: 1024\r\n"));
  EXPECT_THAT(origin_.requests()[0].head, Not(HasSubstr("chunked")));
  const std::vector<AuditRecord> records = sink_.WaitFor(3);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(std::count_if(records.begin(), records.end(),
                          [](const AuditRecord& r) { return r.status == 413 && !r.allowed; }),
            2);
}

TEST_F(ProxyTest, ExpectContinueIsAnsweredByTheProxy) {
  StartProxy({"origin.test"});
  UniqueFd client = Connect(http_port_);
  Send(client.get(),
       absl::StrCat("PUT http://", OriginAuthority(), "/e HTTP/1.1\r\nHost: ", OriginAuthority(),
                    "\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(ReadHead(client.get()), "HTTP/1.1 100 Continue\r\n\r\n");
  Send(client.get(), "abc");
  EXPECT_EQ(StatusOf(ReadToEof(client.get())), 200);
  ASSERT_EQ(origin_.requests().size(), 1u);
  EXPECT_THAT(origin_.requests()[0].head, Not(HasSubstr("Expect")));
}

TEST_F(ProxyTest, RateLimitGives429) {
  config_.requests_per_minute = 2;
  StartProxy({"origin.test"});
  EXPECT_EQ(StatusOf(Get(OriginAuthority())), 200);
  EXPECT_EQ(StatusOf(Get(OriginAuthority())), 200);
  const std::string response = Get(OriginAuthority());
  EXPECT_EQ(StatusOf(response), 429);
  EXPECT_THAT(response, HasSubstr("requestsPerMinute"));
  UniqueFd socks = Connect(socks_port_);
  Send(socks.get(), Socks({5, 1, 0}) + SocksDomainRequest("origin.test", origin_.port()));
  EXPECT_EQ(ReadN(socks.get(), 2), Socks({5, 0}));
  EXPECT_EQ(ReadN(socks.get(), 10)[1], 0x02);
  EXPECT_EQ(origin_.connections(), 2);
  const std::vector<AuditRecord> records = sink_.WaitFor(4);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(std::count_if(records.begin(), records.end(),
                          [](const AuditRecord& r) { return r.status == 429; }),
            2);
}

TEST_F(ProxyTest, Socks5ConnectByDomainAndByAddress) {
  StartProxy({"origin.test", "127.0.0.1"});
  {
    UniqueFd client = Connect(socks_port_);
    Send(client.get(), Socks({5, 2, 2, 0}));
    EXPECT_EQ(ReadN(client.get(), 2), Socks({5, 0}));
    Send(client.get(), SocksDomainRequest("Origin.Test.", origin_.port()));
    const std::string reply = ReadN(client.get(), 10);
    ASSERT_EQ(reply.size(), 10u);
    EXPECT_EQ(reply.substr(0, 4), Socks({5, 0, 0, 1}));
    EXPECT_EQ(reply.substr(4, 4), Socks({127, 0, 0, 1}));  // the proxy's end of the connection
    Send(client.get(), "GET /socks HTTP/1.1\r\nHost: origin.test\r\n\r\n");
    EXPECT_THAT(ReadToEof(client.get()), HasSubstr("GET /socks"));
  }
  {
    UniqueFd client = Connect(socks_port_);
    // Greeting and request in one go, as eager clients send them.
    Send(client.get(),
         Socks({5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, origin_.port() >> 8, origin_.port() & 0xff}));
    EXPECT_EQ(ReadN(client.get(), 2), Socks({5, 0}));
    EXPECT_EQ(ReadN(client.get(), 10)[1], 0);
    Send(client.get(), "GET /v4 HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_THAT(ReadToEof(client.get()), HasSubstr("GET /v4"));
  }
  const std::vector<AuditRecord> records = sink_.WaitFor(2);
  ASSERT_EQ(records.size(), 2u);
  const AuditRecord by_name = Find(records, "origin.test");
  EXPECT_EQ(by_name.protocol, "socks5");
  EXPECT_EQ(by_name.method, "SOCKS5");
  EXPECT_EQ(by_name.status, 200);
  EXPECT_EQ(Find(records, "127.0.0.1").status, 200);
}

TEST_F(ProxyTest, Socks5Refusals) {
  resolver_.Set("evil.test", {"127.0.0.1"});
  StartProxy({"origin.test"});
  auto reply_to = [&](const std::string& request) {
    UniqueFd client = Connect(socks_port_);
    Send(client.get(), Socks({5, 1, 0}));
    EXPECT_EQ(ReadN(client.get(), 2), Socks({5, 0}));
    Send(client.get(), request);
    const std::string reply = ReadN(client.get(), 10);
    EXPECT_EQ(ReadToEof(client.get()), "");  // and then the connection ends
    return reply.size() >= 2 ? static_cast<int>(reply[1]) : -1;
  };
  EXPECT_EQ(reply_to(SocksDomainRequest("origin.test", origin_.port(), /*BIND*/ 2)), 0x07);
  EXPECT_EQ(reply_to(SocksDomainRequest("origin.test", origin_.port(), /*UDP*/ 3)), 0x07);
  EXPECT_EQ(reply_to(Socks({5, 1, 0, 9, 1, 2, 3, 4, 0, 80})), 0x08);
  EXPECT_EQ(reply_to(SocksDomainRequest("evil.test", origin_.port())), 0x02);
  EXPECT_EQ(
      reply_to(SocksDomainRequest(std::string("origin.test\0.evil.test", 22), origin_.port())),
      0x02);
  EXPECT_EQ(reply_to(SocksDomainRequest("origin.test\r\n", origin_.port())), 0x02);
  EXPECT_EQ(reply_to(SocksDomainRequest("nxdomain.test", 80)), 0x02);  // not allowed anyway
  EXPECT_EQ(origin_.connections(), 0);
  {
    UniqueFd client = Connect(socks_port_);
    Send(client.get(), Socks({5, 1, 2}));  // username/password only
    EXPECT_EQ(ReadN(client.get(), 2), Socks({5, 0xff}));
  }
  const std::vector<AuditRecord> records = sink_.WaitFor(8);
  ASSERT_EQ(records.size(), 8u);
  EXPECT_TRUE(std::any_of(records.begin(), records.end(), [](const AuditRecord& r) {
    return absl::StrContains(r.reason, "BIND");
  }));
  Find(records, "origin.test\\x00.evil.test");  // the NUL shown escaped
  for (const AuditRecord& r : records) EXPECT_FALSE(r.allowed);
}

TEST_F(ProxyTest, TransparentListenerForwardsToTheNamedHost) {
  // The destination listens on 127.0.0.2:P; the transparent listener on 127.0.0.1:P stands for
  // "trans.test" at port P, as the DNS stub would have arranged.
  // P is free on 127.0.0.2 when the origin takes it; it may be taken on 127.0.0.1 or .3 by a
  // test running beside this one: then another P.
  std::unique_ptr<LoopbackOrigin> origin;
  uint16_t port = 0, port2 = 0;
  UniqueFd listener, listener2;
  for (int attempt = 0; attempt < 32 && !(listener.valid() && listener2.valid()); ++attempt) {
    origin = std::make_unique<LoopbackOrigin>("127.0.0.2");
    listener = ListenTcp("127.0.0.1", origin->port(), &port);
    listener2 = ListenTcp("127.0.0.3", origin->port(), &port2);
  }
  ASSERT_TRUE(listener.valid() && listener2.valid());
  LoopbackOrigin& destination = *origin;
  resolver_.Set("trans.test", {"127.0.0.2"});
  resolver_.Set("denied.test", {"127.0.0.2"});
  StartProxy({"trans.test"});
  proxy_->AddTransparentListener(std::move(listener), "trans.test");
  UniqueFd client = Connect(port);
  Send(client.get(), "GET /plain HTTP/1.1\r\nHost: trans.test\r\n\r\n");
  EXPECT_THAT(ReadToEof(client.get()), HasSubstr("hello from the origin: GET /plain"));
  client.reset();  // the tunnel ends when both sides have closed
  const AuditRecord r = sink_.Only();
  EXPECT_EQ(r.protocol, "transparent");
  EXPECT_EQ(r.method, "TCP");
  EXPECT_EQ(r.host, "trans.test");
  EXPECT_EQ(r.port, port);
  EXPECT_EQ(r.address, "127.0.0.2");
  EXPECT_EQ(r.status, 200);

  proxy_->AddTransparentListener(std::move(listener2), "denied.test");
  UniqueFd denied = Connect(port2, "127.0.0.3");
  EXPECT_EQ(ReadToEof(denied.get()), "");
  EXPECT_EQ(destination.connections(), 1);
  const std::vector<AuditRecord> records = sink_.WaitFor(2);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(Find(records, "denied.test").status, 403);
}

TEST_F(ProxyTest, ConnectionsOverTheLimitAreRefused) {
  config_.max_connections = 1;
  StartProxy({"origin.test"});
  UniqueFd tunnel = Connect(http_port_);
  Send(tunnel.get(), absl::StrCat("CONNECT ", OriginAuthority(), " HTTP/1.1\r\n\r\n"));
  ASSERT_EQ(StatusOf(ReadHead(tunnel.get())), 200);
  const std::string refused = Http("GET http://origin.test/ HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusOf(refused), 503);
  EXPECT_THAT(refused, HasSubstr("max_connections"));
  UniqueFd socks = Connect(socks_port_);
  EXPECT_EQ(ReadN(socks.get(), 2), Socks({5, 0xff}));
  tunnel.reset();
  // Once the tunnel's thread has finished, there is room again.
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = StatusOf(Get(OriginAuthority()));
    if (status != 200) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status, 200);
  const std::vector<AuditRecord> records = sink_.WaitFor(3);
  ASSERT_GE(records.size(), 3u);
  for (const char* protocol : {"http", "socks5"}) {
    EXPECT_TRUE(std::any_of(records.begin(), records.end(), [&](const AuditRecord& r) {
      return r.status == 503 && r.protocol == protocol;
    })) << protocol;
  }
}

TEST_F(ProxyTest, StopWithOpenTunnelsReturnsPromptlyAndLeavesNothingBehind) {
  const size_t threads_before = CountEntries("/proc/self/task");
  const size_t fds_before = CountEntries("/proc/self/fd");
  StartProxy({"origin.test"});
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(Connect(http_port_));
    Send(clients.back().get(), absl::StrCat("CONNECT ", OriginAuthority(), " HTTP/1.1\r\n\r\n"));
    ASSERT_EQ(StatusOf(ReadHead(clients.back().get())), 200);
  }
  clients.push_back(Connect(socks_port_));
  Send(clients.back().get(), Socks({5, 1, 0}) + SocksDomainRequest("origin.test", origin_.port()));
  ASSERT_EQ(ReadN(clients.back().get(), 12).size(), 12u);
  clients.push_back(Connect(http_port_));
  Send(clients.back().get(), "GET http://origin.test/ HTTP/1.1\r\nHo");  // half a head
  clients.push_back(Connect(socks_port_));                               // nothing sent at all
  absl::SleepFor(absl::Milliseconds(50));

  const absl::Time start = absl::Now();
  proxy_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  for (UniqueFd& client : clients) {
    ReadToEof(client.get());  // returns: the proxy closed its end (a timeout would fail below)
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  proxy_->Stop();  // idempotent
  proxy_.reset();
  clients.clear();
  EXPECT_EQ(sink_.WaitFor(6).size(), 6u);
  // The origin's handlers end once the proxy has closed its side; then every thread and
  // descriptor the proxy made is gone.
  EXPECT_EQ(Settle([] { return CountEntries("/proc/self/task"); }, threads_before), threads_before);
  EXPECT_EQ(Settle([] { return CountEntries("/proc/self/fd"); }, fds_before), fds_before);
}

TEST_F(ProxyTest, ManyRequestsLeakNoDescriptors) {
  StartProxy({"origin.test"});
  EXPECT_EQ(StatusOf(Get(OriginAuthority())), 200);  // warm up
  sink_.WaitFor(1);
  absl::SleepFor(absl::Milliseconds(100));  // the warm-up's threads close their sockets
  const size_t fds_before = CountEntries("/proc/self/fd");
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(StatusOf(Get(OriginAuthority())), 200);
    EXPECT_EQ(StatusOf(Get("denied.test:80")), 403);
  }
  // At most the baseline: a descriptor leaked per request would show up 20 or 40 times over.
  EXPECT_LE(Settle([] { return CountEntries("/proc/self/fd"); }, fds_before), fds_before);
}

}  // namespace
}  // namespace moat::egress
