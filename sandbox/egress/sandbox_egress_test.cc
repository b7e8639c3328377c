// EgressSession's rootless seams: where its resolv.conf goes, what it refuses, and the listeners
// it is handed (made, in a real run, by the sandbox's init in its own network namespace; here
// in a network namespace of the test's, which needs root: skipped otherwise).
#include "sandbox/egress/sandbox_egress.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "sandbox/egress/dns_message.h"
#include "sandbox/egress/netns_sockets.h"
#include "sandbox/netns/net.h"
#include "sandbox/testing/loopback_origin.h"
#include "sandbox/testing/status_matchers.h"

namespace moat::egress {
namespace {

using ::moat::matchers::IsOk;
using ::moat::matchers::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const IpAddress kLoopback = IpAddress::V4(0x7f000001);

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/moat-egress-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // Allows the literal 127.0.0.1 (the origin's host); DNS never goes upstream in these tests.
  EgressOptions Options() {
    EgressOptions o;
    o.sandbox_id = "t-1";
    o.allowed_domains = {*sandbox::DomainPattern::Parse("127.0.0.1")};
    o.allowed_cidrs = {*Cidr::Parse("127.0.0.1/32")};
    o.dns_servers = {*ParseDnsServer("127.0.0.1:9")};
    o.audit_log = dir_ + "/audit.jsonl";
    o.runtime_dir = dir_ + "/run";
    o.rootless = true;
    return o;
  }

  std::string dir_;
};

TEST_F(SessionTest, ResolvConfIsWrittenInTheGivenDirectory) {
  absl::StatusOr<std::string> path = EgressSession::ResolvConf(dir_ + "/run");
  ASSERT_THAT(path, IsOk());
  EXPECT_EQ(*path, dir_ + "/run/resolv.conf");
  EXPECT_THAT(Slurp(*path), HasSubstr("\nnameserver 127.0.0.1\n"));
  EXPECT_EQ(EgressSession::ResolvConf(dir_ + "/run").value_or(""), *path);  // shared, kept
}

// Transparent mode needs what an ordinary user lacks (CAP_BPF, entering the sandbox's network
// namespace while it runs): refused before anything is made, never served half-way.
TEST_F(SessionTest, RootlessRefusesTransparentMode) {
  EgressOptions o = Options();
  o.transparent = true;
  EXPECT_THAT(EgressSession::Create(o),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("network.transparent"), HasSubstr("CAP_BPF"),
                             HasSubstr("run moat as root"))));
  o.rootless = false;
  EXPECT_THAT(EgressSession::Create(o), IsOk());
}

// A rootless session never enters the sandbox's namespaces itself, and serves only what looks
// exactly like its listeners: the count, each one's type, address, port, and listening state.
TEST_F(SessionTest, RootlessSessionRefusesAttachAndAnythingButItsListeners) {
  absl::StatusOr<std::unique_ptr<EgressSession>> session = EgressSession::Create(Options());
  ASSERT_THAT(session, IsOk());
  EXPECT_THAT((*session)->Attach(-1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("AttachListeners")));
  auto socks = [](int n) {
    std::vector<UniqueFd> fds;
    for (int i = 0; i < n; ++i) fds.push_back(*ListenTcp(IpAddress::V4(0x7f000001), 0));
    return fds;
  };
  EXPECT_THAT((*session)->AttachListeners(socks(3)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("3 listeners, not 4")));
  EXPECT_THAT((*session)->AttachListeners(socks(4)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("not 127.0.0.1:3128 (tcp, listening)"),
                             HasSubstr("bound to 127.0.0.1:"))));
  // CheckListener, one by one.
  UniqueFd udp = *BindUdp(kLoopback, 0);
  uint16_t port = 0;
  {
    struct sockaddr_in sa = {};
    socklen_t len = sizeof(sa);
    ::getsockname(udp.get(), reinterpret_cast<struct sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  EXPECT_THAT(CheckListener(udp.get(), SOCK_DGRAM, kLoopback, port), IsOk());
  EXPECT_THAT(CheckListener(udp.get(), SOCK_STREAM, kLoopback, port),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("type")));
  EXPECT_THAT(CheckListener(udp.get(), SOCK_DGRAM, IpAddress::V4(0x7f000002), port),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("bound to 127.0.0.1")));
  UniqueFd unlistened(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(0x7f000001);
  ASSERT_EQ(::bind(unlistened.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof(sa)), 0);
  socklen_t len = sizeof(sa);
  ::getsockname(unlistened.get(), reinterpret_cast<struct sockaddr*>(&sa), &len);
  EXPECT_THAT(CheckListener(unlistened.get(), SOCK_STREAM, kLoopback, ntohs(sa.sin_port)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not listening")));
  UniqueFd pipe_end(::dup(0));
  EXPECT_THAT(CheckListener(pipe_end.get(), SOCK_STREAM, kLoopback, 3128),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a socket")));
}

// Sends `request` to 127.0.0.1:`port` and returns what came back until EOF.
std::string Exchange(uint16_t port, const std::string& request) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(0x7f000001);
  if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof(sa)) != 0) return "";
  (void)!::write(fd.get(), request.data(), request.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof(buf))) > 0;) out.append(buf, n);
  return out;
}

// The data path of a rootless run, without the sandbox: listeners made in a network namespace
// the session never enters, handed over, served. An allowed request reaches the origin, a
// denied one gets 403, a denied name NXDOMAIN, and the audit log has all three.
TEST_F(SessionTest, ServesTheListenersItWasHanded) {
  if (::geteuid() != 0) GTEST_SKIP() << "a network namespace of the test's own needs root";
  testing::LoopbackOrigin origin;  // on the host's loopback, where the proxy dials
  absl::StatusOr<std::unique_ptr<EgressSession>> session = EgressSession::Create(Options());
  ASSERT_THAT(session, IsOk());
  std::string allowed, denied;
  std::optional<DnsResponse> name_denied;
  std::vector<UniqueFd> listeners;
  absl::Notification made, attached;
  std::thread inside([&] {
    // This thread stands for the sandbox: its own network namespace, with only lo.
    absl::Cleanup done = [&] {
      if (!made.HasBeenNotified()) made.Notify();
    };
    ASSERT_EQ(::unshare(CLONE_NEWNET), 0);
    ASSERT_THAT(sandbox::BringUpLoopbackInThisThread(), IsOk());
    for (const ListenerSpec& spec : EgressSession::Listeners()) {
      listeners.push_back(*(spec.type == SOCK_DGRAM ? BindUdp(kLoopback, spec.port)
                                                    : ListenTcp(kLoopback, spec.port)));
    }
    made.Notify();
    attached.WaitForNotification();
    allowed = Exchange(kHttpProxyPort,
                       absl::StrCat("GET http://127.0.0.1:", origin.port(),
                                    "/allowed HTTP/1.1\r\nHost: 127.0.0.1:", origin.port(),
                                    "\r\nConnection: close\r\n\r\n"));
    denied = Exchange(kHttpProxyPort,
                      "GET http://denied.test/x HTTP/1.1\r\nHost: denied.test\r\n"
                      "Connection: close\r\n\r\n");
    UniqueFd udp(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(kDnsPort);
    sa.sin_addr.s_addr = htonl(0x7f000001);
    std::vector<uint8_t> query = BuildDnsQuery(7, "denied.test", kDnsTypeA);
    ::sendto(udp.get(), query.data(), query.size(), 0, reinterpret_cast<struct sockaddr*>(&sa),
             sizeof(sa));
    struct timeval tv = {10, 0};
    ::setsockopt(udp.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t buf[512];
    ssize_t n = ::recv(udp.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      absl::StatusOr<DnsResponse> r = ParseDnsResponse(absl::MakeConstSpan(buf, n));
      if (r.ok()) name_denied = *r;
    }
  });
  // Served from this thread, in the host's namespace (where the proxy's threads dial), as the
  // supervisor does.
  made.WaitForNotification();
  EXPECT_EQ(listeners.size(), EgressSession::Listeners().size());
  EXPECT_THAT((*session)->AttachListeners(std::move(listeners)), IsOk());
  attached.Notify();
  inside.join();
  EXPECT_THAT(allowed, HasSubstr("hello from the origin: GET /allowed"));
  EXPECT_THAT(denied, HasSubstr(" 403 "));
  ASSERT_TRUE(name_denied.has_value());
  EXPECT_EQ(name_denied->rcode, kDnsNxDomain);
  std::vector<sandbox::Violation> violations = (*session)->Finish();
  ASSERT_FALSE(violations.empty());
  const std::string audit = Slurp(dir_ + "/audit.jsonl");
  EXPECT_THAT(audit, HasSubstr("\"allowed\":true"));
  EXPECT_THAT(audit, HasSubstr("denied.test"));
  EXPECT_THAT(audit, HasSubstr("\"protocol\":\"dns\""));
}

}  // namespace
}  // namespace moat::egress
