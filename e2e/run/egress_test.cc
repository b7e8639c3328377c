// Egress: the sandbox reaches the network only through moat's proxy, and only for allowed names.
// A small internet runs on the host's loopback (fixtures/egress_world.py: a DNS server, an HTTP
// and an HTTPS server that record what reaches them); policies point dnsServers at it and open
// 127.0.0.1/32 with allowedCidrs, so that everything else about the address checks still holds.
// Nothing here sends traffic anywhere but loopback: from inside the sandbox, addresses other than
// its own loopback have no route at all.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The fixture process, shared by every test of this file.
class World {
 public:
  World() {
    dir_ = std::make_unique<TempDir>();
    int in[2];
    if (::pipe2(in, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::execlp("python3", "python3", MOAT_E2E_FIXTURES "/egress_world.py", dir_->path().c_str(),
               nullptr);
      ::_exit(127);
    }
    ::close(in[0]);
    stdin_ = in[1];
    const std::string ready = dir_->Path("ready.json");
    // It makes an RSA key first: ~1 s here, up to a minute under emulation (the VM lane).
    if (!Eventually([&] { return PathExists(ready); }, 120)) return;
    nlohmann::json j = nlohmann::json::parse(ReadFile(ready));
    dns_ = j["dns"];
    http_ = j["http"];
    https_ = j["https"];
    cert_ = j["cert"];
  }
  ~World() {
    ::close(stdin_);
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool ok() const { return dns_ > 0 && http_ > 0 && https_ > 0; }
  int dns() const { return dns_; }
  int http() const { return http_; }
  int https() const { return https_; }
  const std::string& cert() const { return cert_; }
  nlohmann::json Stats() const { return nlohmann::json::parse(ReadFile(dir_->Path("stats.json"))); }
  int DnsQueries(const std::string& name_and_type) const {
    nlohmann::json dns = Stats()["dns"];
    return dns.contains(name_and_type) ? dns[name_and_type].get<int>() : 0;
  }

 private:
  std::unique_ptr<TempDir> dir_;
  pid_t pid_ = -1;
  int stdin_ = -1;
  int dns_ = 0, http_ = 0, https_ = 0;
  std::string cert_;
};

class EgressTest : public E2eTest {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() == 0 && SuiteSetupError().empty()) world_ = new World;
  }
  static void TearDownTestSuite() {
    delete world_;
    world_ = nullptr;
  }
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_TRUE(world_ != nullptr && world_->ok()) << "the loopback internet did not start";
  }

  const World& world() { return *world_; }

  // A policy (YAML) with the test's network section, resolving through the fixture's DNS server
  // and allowed to dial the fixture's servers on 127.0.0.1.
  std::string Policy(const std::string& network_extra, bool open_loopback = true) {
    std::string yaml = absl::StrCat("network:\n  dnsServers: [\"127.0.0.1:", world().dns(), "\"]\n",
                                    network_extra);
    if (open_loopback) absl::StrAppend(&yaml, "  allowedCidrs: [127.0.0.1/32]\n");
    const std::string path = dir().Path(absl::StrCat("policy-", ++policies_, ".yaml"));
    WriteFile(path, yaml);
    return path;
  }

  std::string AuditLog() { return dir().Path("audit.jsonl"); }

  // `moat run --json --policy <policy> --audit-log <log> -- sh -c <script>`.
  nlohmann::json Run(const std::string& policy, const std::string& script) {
    return RunJson({"--policy", policy, "--audit-log", AuditLog()}, Sh(script));
  }

  std::vector<nlohmann::json> AuditRecords() {
    std::vector<nlohmann::json> records;
    if (!PathExists(AuditLog())) return records;
    for (absl::string_view line : absl::StrSplit(ReadFile(AuditLog()), '\n', absl::SkipEmpty())) {
      records.push_back(nlohmann::json::parse(line));
    }
    return records;
  }

  // The audit record for `host` (the last one), or null.
  nlohmann::json AuditFor(const std::string& host, const std::string& protocol = "") {
    nlohmann::json found;
    for (const nlohmann::json& r : AuditRecords()) {
      if (r["host"] == host && (protocol.empty() || r["protocol"] == protocol)) found = r;
    }
    return found;
  }

  std::string Url(const std::string& host, const std::string& path = "/") {
    return absl::StrCat("http://", host, ":", world().http(), path);
  }
  // curl printing "<url> status=<code>" after the body (which ends in a newline); -sS so errors
  // show.
  std::string Curl(const std::string& args) {
    return absl::StrCat("curl -sS --max-time 10 -w '%{url_effective} status=%{http_code}\\n' ",
                        args);
  }

  static World* world_;
  int policies_ = 0;
};

World* EgressTest::world_ = nullptr;

std::string Out(const nlohmann::json& r) { return r["stdout"].get<std::string>(); }

TEST_F(EgressTest, AllowedDomainWorksWithCurlUrllibAndConnect) {
  const std::string policy = Policy("  allowedDomains: [allowed.test, secure.test]\n");
  nlohmann::json r = Run(
      policy, absl::StrCat(Curl(Url("allowed.test", "/plain")), "; ",
                           "python3 -c \"import urllib.request; print(urllib.request.urlopen('",
                           Url("allowed.test", "/urllib"), "').read().decode())\"; ",
                           Curl(absl::StrCat("--cacert ", world().cert(),
                                             " https://secure.test:", world().https(), "/tls"))));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(Out(r), HasSubstr(absl::StrCat("hello allowed.test:", world().http(), " /plain")))
      << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr(absl::StrCat("hello allowed.test:", world().http(), " /urllib")))
      << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr(absl::StrCat("hello secure.test:", world().https(), " /tls")))
      << Describe(r);
  nlohmann::json tunnel = AuditFor("secure.test", "connect");
  ASSERT_FALSE(tunnel.is_null()) << ReadFile(AuditLog());
  EXPECT_EQ(tunnel["allowed"], true);
  EXPECT_EQ(tunnel["address"], "127.0.0.1");
  EXPECT_GT(tunnel["bytes_down"].get<uint64_t>(), 0u);
  EXPECT_TRUE(r["violations"].empty()) << Describe(r);
}

TEST_F(EgressTest, SocksClientsGoThroughTheSameChecks) {
  const std::string policy = Policy("  allowedDomains: [allowed.test]\n");
  nlohmann::json r = Run(
      policy,
      absl::StrCat(
          Curl(absl::StrCat("--proxy socks5h://127.0.0.1:1080 ", Url("allowed.test", "/socks"))),
          "; ",
          Curl(absl::StrCat("--proxy socks5h://127.0.0.1:1080 ", Url("denied.test", "/socks")))));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(Out(r), HasSubstr("/socks status=200")) << Describe(r);
  EXPECT_THAT(Out(r), Not(HasSubstr("hello denied.test"))) << Describe(r);
  EXPECT_EQ(AuditFor("denied.test", "socks5")["allowed"], false) << ReadFile(AuditLog());
}

TEST_F(EgressTest, DeniedDomainIsRefusedAuditedAndReported) {
  const std::string policy = Policy("  allowedDomains: [allowed.test]\n");
  const int before = world().Stats()["http_requests"];
  nlohmann::json r = Run(policy, Curl(Url("denied.test", "/x")));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(Out(r), HasSubstr("status=403")) << Describe(r);
  EXPECT_EQ(world().Stats()["http_requests"].get<int>(), before) << "the request went out";
  EXPECT_TRUE(HasViolation(r, "network", "denied.test")) << Describe(r);
  nlohmann::json audit = AuditFor("denied.test");
  ASSERT_FALSE(audit.is_null()) << ReadFile(AuditLog());
  EXPECT_EQ(audit["allowed"], false);
  EXPECT_EQ(audit["status"], 403);
  EXPECT_THAT(audit["reason"].get<std::string>(), HasSubstr("not in allowedDomains"));
  EXPECT_EQ(world().DnsQueries("denied.test/A"), 0) << "a denied name was looked up";
}

TEST_F(EgressTest, WildcardsPortsAndDenyOverAllow) {
  const std::string policy = Policy(absl::StrCat(
      "  allowedDomains: ['*.wild.test', 'allowed.test:", world().http(),
      "', other.test]\n  deniedDomains: [bad.wild.test, 'other.test:", world().http(), "']\n"));
  nlohmann::json r = Run(
      policy, absl::StrCat(Curl(Url("sub.wild.test", "/sub")), "; ",   // allowed: subdomain
                           Curl(Url("wild.test", "/apex")), "; ",      // the apex is not
                           Curl(Url("bad.wild.test", "/deny")), "; ",  // deny beats allow
                           Curl(Url("allowed.test", "/port")), "; ",   // the listed port
                           Curl(absl::StrCat("http://allowed.test:", world().https(), "/other")),
                           "; ", Curl(Url("other.test", "/denied-port"))));
  ASSERT_TRUE(r.is_object());
  const std::string out = Out(r);
  EXPECT_THAT(out, HasSubstr("/sub status=200")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("/apex status=403")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("/deny status=403")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("/port status=200")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("/other status=403")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("/denied-port status=403")) << Describe(r);
  EXPECT_THAT(out, Not(HasSubstr("hello wild.test"))) << Describe(r);
  EXPECT_THAT(out, Not(HasSubstr("hello bad.wild.test"))) << Describe(r);
  EXPECT_THAT(out, Not(HasSubstr("hello other.test"))) << Describe(r);
  EXPECT_EQ(AuditFor("bad.wild.test")["allowed"], false);
  EXPECT_THAT(AuditFor("bad.wild.test")["reason"].get<std::string>(), HasSubstr("deniedDomains"));
}

// Requests written by hand, so the proxy sees exactly the bytes an attacker would send.
TEST_F(EgressTest, HostileHostSpellingsAreRefused) {
  const std::string policy = Policy("  allowedDomains: [allowed.test]\n");
  const std::string script = absl::StrCat(R"(
import socket
def ask(line, extra=b""):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(line + b"\r\n" + extra + b"\r\n")
    reply = s.recv(4096).split(b"\r\n")[0]
    print(repr(line), reply.decode(errors="replace"))
    s.close()
port = b")",
                                          world().http(), R"("
ask(b"CONNECT allowed.test\x00.evil:" + port + b" HTTP/1.1")
ask(b"CONNECT allowed.test%00.evil:" + port + b" HTTP/1.1")
ask(b"CONNECT allowed.test\r.evil:" + port + b" HTTP/1.1")
ask(b"GET http://allowed.test:" + port + b"/ HTTP/1.1", b"Host: evil.test\r\n")
ask(b"CONNECT 2130706433:" + port + b" HTTP/1.1")
ask(b"CONNECT 0x7f.0.0.1:" + port + b" HTTP/1.1")
ask(b"CONNECT 127.1:" + port + b" HTTP/1.1")
ask(b"CONNECT [::ffff:127.0.0.1]:" + port + b" HTTP/1.1")
ask(b"CONNECT 2852039166:80 HTTP/1.1")
# SOCKS5 with a NUL inside the domain name.
s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
s.sendall(b"\x05\x01\x00")
s.recv(2)
name = b"allowed.test\x00.evil"
s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + int(port).to_bytes(2, "big"))
print("socks-nul", s.recv(10)[1])
)");
  const int before = world().Stats()["http_requests"];
  nlohmann::json r =
      RunJson({"--policy", policy, "--audit-log", AuditLog()}, {"python3", "-c", script});
  ASSERT_TRUE(r.is_object());
  const std::string out = Out(r);
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 10u) << Describe(r);
  for (size_t i = 0; i < 9; ++i) {
    // 400 for spellings that are not host names, 403 for numeric hosts that are not allowed.
    EXPECT_TRUE(absl::StrContains(lines[i], " 400 ") || absl::StrContains(lines[i], " 403 "))
        << lines[i];
  }
  EXPECT_NE(lines[9], "socks-nul 0") << "SOCKS5 accepted a name with a NUL";
  EXPECT_EQ(world().Stats()["http_requests"].get<int>(), before) << "a request went out";
  // The numeric spellings were understood as 127.0.0.1 and 169.254.169.254, not as names.
  bool saw_loopback = false, saw_metadata = false;
  for (const nlohmann::json& rec : AuditRecords()) {
    saw_loopback = saw_loopback || rec["host"] == "127.0.0.1";
    saw_metadata = saw_metadata || rec["host"] == "169.254.169.254";
  }
  EXPECT_TRUE(saw_loopback) << ReadFile(AuditLog());
  EXPECT_TRUE(saw_metadata) << ReadFile(AuditLog());
}

TEST_F(EgressTest, AllowedNamesThatResolveInsideAreRefused) {
  // No allowedCidrs: 127.0.0.1 is loopback like any other.
  const std::string policy =
      Policy("  allowedDomains: [allowed.test, loopy.test, meta.test]\n", false);
  const int before = world().Stats()["http_requests"];
  nlohmann::json r =
      Run(policy, absl::StrCat(Curl(Url("allowed.test", "/lo")), "; ", Curl(Url("loopy.test")),
                               "; ", Curl(Url("meta.test"))));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(Out(r), Not(HasSubstr("status=200"))) << Describe(r);
  EXPECT_EQ(world().Stats()["http_requests"].get<int>(), before) << "a request went out";
  EXPECT_THAT(AuditFor("allowed.test")["reason"].get<std::string>(), HasSubstr("loopback"));
  EXPECT_THAT(AuditFor("loopy.test")["reason"].get<std::string>(), HasSubstr("loopback"));
  EXPECT_THAT(AuditFor("meta.test")["reason"].get<std::string>(), HasSubstr("metadata"));
  EXPECT_EQ(AuditFor("meta.test")["address"], "169.254.169.254");
}

// rebind.test answers 127.0.0.1 and 169.254.169.254 in turn. The proxy looks a name up once per
// request and dials what it checked, so each request is either served from 127.0.0.1 or refused
// as metadata; a second lookup would show up as two queries for one request.
TEST_F(EgressTest, RebindingBetweenLookupsGetsNowhere) {
  const std::string policy = Policy("  allowedDomains: [rebind.test]\n");
  const int queries_before = world().DnsQueries("rebind.test/A");
  nlohmann::json r =
      Run(policy,
          absl::StrCat(Curl(Url("rebind.test", "/1")), "; ", Curl(Url("rebind.test", "/2")), "; ",
                       Curl(Url("rebind.test", "/3")), "; ", Curl(Url("rebind.test", "/4"))));
  ASSERT_TRUE(r.is_object());
  const int queries = world().DnsQueries("rebind.test/A") - queries_before;
  EXPECT_EQ(queries, 4) << "one lookup per request\n" << Describe(r);
  int served = 0, refused = 0;
  for (const nlohmann::json& rec : AuditRecords()) {
    if (rec["host"] != "rebind.test" || rec["protocol"] == "dns") continue;
    if (rec["allowed"] == true) {
      EXPECT_EQ(rec["address"], "127.0.0.1");
      ++served;
    } else {
      EXPECT_THAT(rec["reason"].get<std::string>(), HasSubstr("metadata"));
      ++refused;
    }
  }
  EXPECT_EQ(served, 2) << ReadFile(AuditLog());
  EXPECT_EQ(refused, 2) << ReadFile(AuditLog());
}

TEST_F(EgressTest, OversizedBodiesAndFloodsAreLimited) {
  const std::string policy = Policy(
      "  allowedDomains: [allowed.test]\n  maxRequestBodyBytes: 1K\n"
      "  requestsPerMinute: 5\n");
  const int bytes_before = world().Stats()["post_bytes"];
  nlohmann::json r = Run(
      policy,
      absl::StrCat("head -c 4096 /dev/zero > /tmp/big; ",
                   Curl(absl::StrCat("--data-binary @/tmp/big ", Url("allowed.test", "/up"))),
                   "; for i in 1 2 3 4 5 6 7 8; do ", Curl(Url("allowed.test", "/f")), "; done"));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(Out(r), HasSubstr("status=413")) << Describe(r);
  EXPECT_EQ(world().Stats()["post_bytes"].get<int>(), bytes_before) << "the body went out";
  EXPECT_THAT(Out(r), HasSubstr("status=429")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("status=200")) << Describe(r);
}

// Denied requests are not rate limited (they cost nothing upstream), but each is a line in a log
// on the host's disk: a flood of them, or of DNS questions, must not fill it.
TEST_F(EgressTest, FloodsOfDenialsCannotFillTheHostsDisk) {
  const std::string policy = Policy("  allowedDomains: [allowed.test]\n  requestsPerMinute: 5\n");
  const std::string script = R"(
import socket, struct
for i in range(1300):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT denied.test:443 HTTP/1.1\r\n\r\n")
    s.recv(100)
    s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
refused = 0
for i in range(800):
    q = struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + b"\x06denied\x04test\x00\x00\x01\x00\x01"
    u.sendto(q, ("127.0.0.1", 53))
    try:
        refused += (u.recv(512)[3] & 0xf) == 5
    except socket.timeout:
        pass
print("dns-refused", refused)
)";
  nlohmann::json r =
      RunJson({"--policy", policy, "--audit-log", AuditLog()}, {"python3", "-c", script});
  ASSERT_TRUE(r.is_object());
  std::vector<nlohmann::json> records = AuditRecords();
  // A minute's worth of lines (1000 here), plus what the bucket refills while the flood runs.
  EXPECT_LE(records.size(), 1100u) << "the log grew with the flood";
  EXPECT_GE(records.size(), 900u);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back()["protocol"], "audit");
  EXPECT_THAT(records.back()["reason"].get<std::string>(), HasSubstr("records not written"));
  EXPECT_THAT(Out(r), Not(HasSubstr("dns-refused 0\n"))) << Describe(r);
  EXPECT_TRUE(HasViolation(r, "network", "DNS questions refused")) << Describe(r);
  EXPECT_LE(r["violations"].size(), 70u);
}

TEST_F(EgressTest, DnsStubAnswersOnlyAllowedNames) {
  const std::string policy = Policy("  allowedDomains: [allowed.test]\n");
  const int denied_before = world().DnsQueries("denied.test/A");
  nlohmann::json r = Run(policy,
                         "cat /etc/resolv.conf; getent hosts allowed.test; "
                         "getent hosts denied.test; echo denied-rc=$?; "
                         "getent hosts exfil-aGVsbG8.denied.test; echo tunnel-rc=$?");
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(Out(r), HasSubstr("nameserver 127.0.0.1")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("127.0.0.1       allowed.test")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("denied-rc=2")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("tunnel-rc=2")) << Describe(r);
  EXPECT_EQ(world().DnsQueries("denied.test/A"), denied_before);
  EXPECT_EQ(world().DnsQueries("exfil-agvsbg8.denied.test/A"), 0) << "the query left the host";
  EXPECT_EQ(AuditFor("denied.test", "dns")["allowed"], false) << ReadFile(AuditLog());
}

TEST_F(EgressTest, RawTcpAndUdpGoNowhere) {
  const std::string policy = Policy("  allowedDomains: [allowed.test]\n");
  const int before = world().Stats()["http_requests"];
  const std::string script = absl::StrCat(R"(
import socket
def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "connected"
    except OSError as e:
        return type(e).__name__
def udp(host, port):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", (host, port))
        return "sent"
    except OSError as e:
        return type(e).__name__
print("tcp-host-loopback", tcp("127.0.0.1", )",
                                          world().http(), R"())
print("tcp-testnet", tcp("192.0.2.1", 80))
print("udp-testnet", udp("192.0.2.1", 53))
)");
  nlohmann::json r = RunJson({"--policy", policy}, {"python3", "-c", script});
  ASSERT_TRUE(r.is_object());
  // The sandbox's 127.0.0.1 is its own: nothing listens on the fixture's port there.
  EXPECT_THAT(Out(r), HasSubstr("tcp-host-loopback ConnectionRefusedError")) << Describe(r);
  EXPECT_THAT(Out(r), Not(HasSubstr("connected"))) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("tcp-testnet OSError")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("udp-testnet OSError")) << Describe(r);
  EXPECT_EQ(world().Stats()["http_requests"].get<int>(), before);
}

// Clients that ignore the proxy variables: allowed names resolve to local addresses of the
// supervisor's, which take every port (the fixture's servers are on ephemeral ports, and the
// allow entries name none).
TEST_F(EgressTest, TransparentModeServesClientsWithoutProxySupport) {
  const std::string policy =
      Policy("  allowedDomains: [allowed.test, secure.test]\n  transparent: true\n");
  nlohmann::json r =
      Run(policy,
          absl::StrCat("unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY; ",
                       Curl(absl::StrCat("--noproxy '*' ", Url("allowed.test", "/direct"))), "; ",
                       Curl(absl::StrCat("--noproxy '*' --cacert ", world().cert(),
                                         " https://secure.test:", world().https(), "/tls")),
                       "; ", Curl(absl::StrCat("--noproxy '*' ", Url("denied.test", "/d"))),
                       "; getent hosts allowed.test"));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(Out(r), HasSubstr(absl::StrCat("hello allowed.test:", world().http(), " /direct")))
      << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr(absl::StrCat("hello secure.test:", world().https(), " /tls")))
      << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("/d status=000")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("127.77.")) << "allowed names resolve to the supervisor's\n"
                                            << Describe(r);
  nlohmann::json audit = AuditFor("allowed.test", "transparent");
  ASSERT_FALSE(audit.is_null()) << ReadFile(AuditLog());
  EXPECT_EQ(audit["allowed"], true);
  EXPECT_EQ(audit["port"], world().http());
  EXPECT_EQ(audit["address"], "127.0.0.1");
}

// A transparent address takes connections only for the name it was handed out for, and only
// within the policy; raw connections to the range without a lookup go nowhere.
TEST_F(EgressTest, TransparentAddressesAreNotAWayAround) {
  const std::string policy = Policy(absl::StrCat(
      "  allowedDomains: [allowed.test]\n  deniedDomains: ['allowed.test:", world().https(),
      "']\n  transparent: true\n"));
  const std::string script = absl::StrCat(R"(
import socket
def tcp(host, port):
    try:
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(b"GET /raw HTTP/1.0\r\nHost: x\r\n\r\n")
        data = s.recv(100)
        return "got " + data.decode(errors="replace").split("\r\n")[0] if data else "closed"
    except OSError as e:
        return type(e).__name__
print("unassigned", tcp("127.77.200.1", )",
                                          world().http(), R"())
a = socket.gethostbyname("allowed.test")
print("assigned", a.startswith("127.77."), tcp(a, )",
                                          world().http(), R"())
print("denied-port", tcp(a, )",
                                          world().https(), R"())
)");
  const int before = world().Stats()["http_requests"];
  nlohmann::json r =
      RunJson({"--policy", policy, "--audit-log", AuditLog()}, {"python3", "-c", script});
  ASSERT_TRUE(r.is_object());
  // Refused connections are closed (or reset: the request was already sent) without a reply.
  EXPECT_THAT(Out(r), Not(HasSubstr("unassigned got"))) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("assigned True got HTTP/1.0 200")) << Describe(r);
  EXPECT_THAT(Out(r), Not(HasSubstr("denied-port got"))) << Describe(r);
  EXPECT_TRUE(HasViolation(r, "network", "127.77.200.1")) << Describe(r);
  EXPECT_EQ(world().Stats()["http_requests"].get<int>(), before + 1);
}

TEST_F(EgressTest, TheSandboxCannotReadTheAuditLogOrChangeItsProxy) {
  const std::string policy = Policy("  allowedDomains: [allowed.test]\n");
  nlohmann::json r = Run(policy, absl::StrCat(Curl(Url("allowed.test")), "; cat ", AuditLog(),
                                              "; echo x >> ", AuditLog(), "; echo append-rc=$?; ",
                                              "ls -A /var/lib/moat | wc -l; "
                                              "env | grep -i _proxy= | sort"));
  ASSERT_TRUE(r.is_object());
  // The log is covered by /dev/null inside: nothing to read, and what is written goes nowhere.
  EXPECT_THAT(Out(r), HasSubstr("/ status=200")) << Describe(r);
  EXPECT_THAT(Out(r), Not(HasSubstr("\"sandbox\""))) << Describe(r);
  EXPECT_THAT(ReadFile(AuditLog()), Not(HasSubstr("\nx\n"))) << "the sandbox wrote into the log";
  EXPECT_THAT(Out(r), HasSubstr("\n0\n")) << "/var/lib/moat is not empty inside\n" << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("HTTPS_PROXY=http://127.0.0.1:3128")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("ALL_PROXY=socks5h://127.0.0.1:1080")) << Describe(r);
  ASSERT_FALSE(AuditRecords().empty());
  EXPECT_EQ(AuditRecords().back()["host"], "allowed.test") << "the sandbox wrote into the log";
}

TEST_F(EgressTest, NoAllowedDomainMeansNoProxyAndNoDns) {
  nlohmann::json r = RunJson({}, Sh("echo proxies=$(env | grep -ci proxy); "
                                    "getent hosts allowed.test; echo rc=$?; "
                                    "echo stub=$(grep -c 'Written by moat' /etc/resolv.conf)"));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(Out(r), HasSubstr("proxies=0\n")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("rc=2")) << Describe(r);
  EXPECT_THAT(Out(r), HasSubstr("stub=0\n")) << "the host's resolv.conf was replaced\n"
                                             << Describe(r);
}

}  // namespace
}  // namespace moat::e2e
