#include "sandbox/policy/policy.h"

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/testing/values.h"

namespace moat::sandbox {
namespace {

using testing::Cidrs;
using ::testing::Contains;
using testing::DnsServers;
using testing::Domains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using testing::Texts;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

PolicyLayer Layer(const std::string& source) {
  PolicyLayer layer;
  layer.source = source;
  return layer;
}

constexpr absl::string_view kProject = "/repo/.moat/policy.yaml";

// Sets every limit of `layer` to its value in `limits`.
void SetEveryLimit(const Limits& limits, PolicyLayer* layer) {
  layer->memory_bytes = limits.memory_bytes;
  layer->pids = limits.pids;
  layer->cpus = limits.cpus;
  layer->cpu_timeout = limits.cpu_timeout;
  layer->wall_timeout = limits.wall_timeout;
  layer->tmpfs_bytes = limits.tmpfs_bytes;
}

// Limit by limit, so that a failure names the limit that differs.
void ExpectLimits(const Limits& got, const Limits& want) {
  EXPECT_EQ(got.memory_bytes, want.memory_bytes);
  EXPECT_EQ(got.pids, want.pids);
  EXPECT_EQ(got.cpus, want.cpus);
  EXPECT_EQ(got.cpu_timeout, want.cpu_timeout);
  EXPECT_EQ(got.wall_timeout, want.wall_timeout);
  EXPECT_EQ(got.tmpfs_bytes, want.tmpfs_bytes);
}

// ---------------------------------------------------------------------------------------------
// Paths

TEST(NormalizeAbsolutePathTest, IsLexical) {
  struct Case {
    absl::string_view path;
    absl::string_view normalised;
  } cases[] = {
      {"/", "/"},         {"//a//b/", "/a/b"}, {"/a/./b/../c", "/a/c"},
      {"/../../x", "/x"}, {"/a/b/../..", "/"}, {"/a/..b/.c", "/a/..b/.c"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(NormalizeAbsolutePath(c.path), c.normalised) << c.path;
  }
}

TEST(IsPathUnderTest, ComparesWholeComponents) {
  EXPECT_TRUE(IsPathUnder("/a", "/a"));
  EXPECT_TRUE(IsPathUnder("/a/b", "/a"));
  EXPECT_TRUE(IsPathUnder("/a/b/c", "/a/b"));
  EXPECT_TRUE(IsPathUnder("/anything", "/"));
  EXPECT_FALSE(IsPathUnder("/ab", "/a"));
  EXPECT_FALSE(IsPathUnder("/a", "/a/b"));
  EXPECT_FALSE(IsPathUnder("/b", "/a"));
}

TEST(ResolvePolicyPathTest, ExpandsHomeAndCwd) {
  PathContext paths{.home = "/home/u", .cwd = "/work/repo"};
  EXPECT_EQ(*ResolvePolicyPath("~", paths), "/home/u");
  EXPECT_EQ(*ResolvePolicyPath("~/", paths), "/home/u");
  EXPECT_EQ(*ResolvePolicyPath("~/.netrc", paths), "/home/u/.netrc");
  EXPECT_EQ(*ResolvePolicyPath(".", paths), "/work/repo");
  EXPECT_EQ(*ResolvePolicyPath("secrets/", paths), "/work/repo/secrets");
  EXPECT_EQ(*ResolvePolicyPath("../other", paths), "/work/other");
  EXPECT_EQ(*ResolvePolicyPath("/etc/../var", paths), "/var");
  EXPECT_EQ(*ResolvePolicyPath("a~b", paths), "/work/repo/a~b");
}

TEST(ResolvePolicyPathTest, RefusesWhatItCannotResolveExactly) {
  PathContext paths{.home = "/home/u", .cwd = "/work/repo"};
  EXPECT_THAT(Message(ResolvePolicyPath("", paths).status()), HasSubstr("empty"));
  EXPECT_THAT(Message(ResolvePolicyPath("~bob/x", paths).status()), HasSubstr("~user"));
  EXPECT_THAT(Message(ResolvePolicyPath("*.key", paths).status()), HasSubstr("glob"));
  EXPECT_THAT(Message(ResolvePolicyPath("a[12]", paths).status()), HasSubstr("glob"));
  EXPECT_THAT(Message(ResolvePolicyPath("a\nb", paths).status()), HasSubstr("control byte"));
  EXPECT_THAT(Message(ResolvePolicyPath(absl::string_view("/a\0b", 4), paths).status()),
              HasSubstr("NUL"));
  EXPECT_THAT(Message(ResolvePolicyPath("~/x", PathContext{.home = "", .cwd = "/"}).status()),
              HasSubstr("home directory"));
  EXPECT_THAT(Message(ResolvePolicyPath("x", PathContext{.home = "/h", .cwd = ""}).status()),
              HasSubstr("working directory"));
  EXPECT_THAT(Message(ResolvePolicyPath("/" + std::string(5000, 'a'), paths).status()),
              HasSubstr("PATH_MAX"));
}

TEST(ValidateEnvVarTest, ChecksNamesAndValues) {
  EXPECT_TRUE(ValidateEnvVar("PATH", "/bin").ok());
  EXPECT_TRUE(ValidateEnvVar("_x1", "").ok());
  EXPECT_FALSE(ValidateEnvVar("", "v").ok());
  EXPECT_FALSE(ValidateEnvVar("1A", "v").ok());
  EXPECT_FALSE(ValidateEnvVar("A=B", "v").ok());
  EXPECT_FALSE(ValidateEnvVar("A B", "v").ok());
  EXPECT_FALSE(ValidateEnvVar("Ä", "v").ok());
  EXPECT_FALSE(ValidateEnvVar("A", absl::string_view("a\0b", 3)).ok());
}

TEST(DescribeSourceTest, QuotesFilesOnly) {
  EXPECT_EQ(DescribeSource("/repo/.moat/policy.yaml"), "policy file \"/repo/.moat/policy.yaml\"");
  EXPECT_EQ(DescribeSource("policy.json"), "policy file \"policy.json\"");
  EXPECT_EQ(DescribeSource("command line"), "command line");
}

// ---------------------------------------------------------------------------------------------
// ApplyLayer: trusted layers

TEST(ApplyLayerTest, TrustedLayerReplacesAllowListsAndLimits) {
  Policy policy;
  policy.allowed_domains = Domains({"a.com"});
  policy.allow_write = {"/old"};
  PolicyLayer layer = Layer("/home/u/.config/moat/policy.yaml");
  layer.allowed_domains = {{"B.com", "*.c.com:443"}};
  layer.allow_write = {{"/new", "/new2/"}};
  const Limits limits{.memory_bytes = 2ull << 30,
                      .pids = 1000,
                      .cpus = 4,
                      .cpu_timeout = absl::Minutes(5),
                      .wall_timeout = absl::Minutes(10),
                      .tmpfs_bytes = 1ull << 30};
  SetEveryLimit(limits, &layer);
  layer.hide_home = false;
  ASSERT_TRUE(ApplyLayer(layer, LayerTrust::kTrusted, &policy).ok());
  EXPECT_THAT(Texts(policy.allowed_domains), ElementsAre("b.com", "*.c.com:443"));
  EXPECT_THAT(policy.allow_write, ElementsAre("/new", "/new2"));
  ExpectLimits(policy.limits, limits);
  EXPECT_FALSE(policy.hide_home);
  EXPECT_THAT(policy.sources, ElementsAre("/home/u/.config/moat/policy.yaml"));
}

TEST(ApplyLayerTest, TrustedLayerMayEmptyTheAllowLists) {
  Policy policy;
  policy.allowed_domains = Domains({"a.com"});
  policy.allow_write = {"/w"};
  PolicyLayer layer = Layer("command line");
  layer.allowed_domains.emplace();
  layer.allow_write.emplace();
  ASSERT_TRUE(ApplyLayer(layer, LayerTrust::kTrusted, &policy).ok());
  EXPECT_THAT(policy.allowed_domains, IsEmpty());
  EXPECT_THAT(policy.allow_write, IsEmpty());
}

TEST(ApplyLayerTest, DenyListsAreUnionsForEveryTrust) {
  for (LayerTrust trust : {LayerTrust::kTrusted, LayerTrust::kProject}) {
    Policy policy;
    policy.denied_domains = Domains({"a.com"}, DomainPattern::ListKind::kDeny);
    policy.deny_read = {"/r1"};
    policy.deny_write = {"/w1"};
    PolicyLayer layer = Layer("/p.yaml");
    layer.denied_domains = {{"b.com", "A.com"}};
    layer.deny_read = {{"/r2", "/r1"}};
    layer.deny_write = {{"/w2"}};
    ASSERT_TRUE(ApplyLayer(layer, trust, &policy).ok());
    EXPECT_THAT(Texts(policy.denied_domains), ElementsAre("a.com", "b.com"));
    EXPECT_THAT(policy.deny_read, ElementsAre("/r1", "/r2"));
    EXPECT_THAT(policy.deny_write, ElementsAre("/w1", "/w2"));
    // An empty deny list removes nothing.
    PolicyLayer empty = Layer("/q.yaml");
    empty.denied_domains.emplace();
    empty.deny_read.emplace();
    empty.deny_write.emplace();
    ASSERT_TRUE(ApplyLayer(empty, trust, &policy).ok());
    EXPECT_EQ(policy.denied_domains.size(), 2u);
    EXPECT_EQ(policy.deny_read.size(), 2u);
    EXPECT_EQ(policy.deny_write.size(), 2u);
  }
}

TEST(ApplyLayerTest, EnvKeepsOrderAndLaterLayersOverrideInPlace) {
  Policy policy;
  PolicyLayer first = Layer("/a.yaml");
  first.env = {{"A", "1"}, {"B", "2"}};
  PolicyLayer second = Layer("/b.yaml");
  second.env = {{"C", "3"}, {"A", "override"}};
  ASSERT_TRUE(ApplyLayer(first, LayerTrust::kTrusted, &policy).ok());
  ASSERT_TRUE(ApplyLayer(second, LayerTrust::kProject, &policy).ok());
  EXPECT_THAT(policy.env, ElementsAre(Pair("A", "override"), Pair("B", "2"), Pair("C", "3")));
}

TEST(ApplyLayerTest, ValidatesTrustedLayersToo) {
  struct Case {
    const char* name;
    void (*set)(PolicyLayer*);
    absl::string_view message;
  } cases[] = {
      {"memory 0", [](PolicyLayer* l) { l->memory_bytes = 0; }, "key \"limits.memory\""},
      {"tmpfs 0", [](PolicyLayer* l) { l->tmpfs_bytes = 0; }, "key \"limits.tmpfsSize\""},
      {"pids 0", [](PolicyLayer* l) { l->pids = 0; }, "key \"limits.pids\""},
      {"pids huge", [](PolicyLayer* l) { l->pids = kMaxPids + 1; }, "key \"limits.pids\""},
      {"cpus 0", [](PolicyLayer* l) { l->cpus = 0; }, "key \"limits.cpus\""},
      {"cpus NaN", [](PolicyLayer* l) { l->cpus = std::nan(""); }, "key \"limits.cpus\""},
      {"cpus 2000", [](PolicyLayer* l) { l->cpus = 2000; }, "key \"limits.cpus\""},
      {"cpu timeout 0", [](PolicyLayer* l) { l->cpu_timeout = absl::ZeroDuration(); },
       "key \"limits.cpuTimeout\""},
      {"wall timeout 1us", [](PolicyLayer* l) { l->wall_timeout = absl::Microseconds(1); },
       "key \"limits.wallTimeout\""},
      {"wall timeout infinite", [](PolicyLayer* l) { l->wall_timeout = absl::InfiniteDuration(); },
       "key \"limits.wallTimeout\""},
      {"allow *", [](PolicyLayer* l) { l->allowed_domains = {{"*"}}; },
       "key \"network.allowedDomains\""},
      {"bad denied domain", [](PolicyLayer* l) { l->denied_domains = {{"a b"}}; },
       "key \"network.deniedDomains\""},
      {"relative path", [](PolicyLayer* l) { l->allow_write = {{"rel/path"}}; }, "not absolute"},
      {"glob path", [](PolicyLayer* l) { l->deny_read = {{"/a/*"}}; }, "glob"},
      {"control byte in env name",
       [](PolicyLayer* l) {
         l->env = {{"A\x1b[2J", "v"}};
       },
       "key \"env.A\\x1b[2J\""},
      {"bad env name",
       [](PolicyLayer* l) {
         l->env = {{"1X", "v"}};
       },
       "key \"env.1X\""},
      {"NUL env value",
       [](PolicyLayer* l) {
         l->env = {{"X", std::string("a\0b", 3)}};
       },
       "NUL"},
  };
  for (const auto& c : cases) {
    Policy policy;
    Policy before = policy;
    PolicyLayer layer = Layer("command line");
    c.set(&layer);
    absl::Status status = ApplyLayer(layer, LayerTrust::kTrusted, &policy);
    ASSERT_FALSE(status.ok()) << c.name;
    EXPECT_THAT(Message(status), HasSubstr(std::string(c.message))) << c.name;
    EXPECT_THAT(Message(status), ::testing::StartsWith("command line: key ")) << c.name;
    EXPECT_EQ(policy.sources, before.sources) << c.name;
  }
}

TEST(ApplyLayerTest, NormalisesPathsAndDomainsFromFlags) {
  Policy policy;
  PolicyLayer layer = Layer("command line");
  layer.allow_write = {{"/a/./b/", "/a/b"}};
  layer.allowed_domains = {{"X.COM.", "x.com"}};
  ASSERT_TRUE(ApplyLayer(layer, LayerTrust::kTrusted, &policy).ok());
  EXPECT_THAT(policy.allow_write, ElementsAre("/a/b"));
  EXPECT_THAT(Texts(policy.allowed_domains), ElementsAre("x.com"));
}

// ---------------------------------------------------------------------------------------------
// ApplyLayer: project layers may only tighten

Policy TrustedBase() {
  Policy policy;
  policy.allowed_domains = Domains({"*.example.com", "api.x.com:443", "pypi.org"});
  policy.allow_write = {"/repo", "/tmp/cache"};
  return policy;
}

TEST(ApplyLayerProjectTest, MayLowerEveryLimit) {
  Policy policy = TrustedBase();
  PolicyLayer layer = Layer(std::string(kProject));
  // Every limit below its default, which TrustedBase keeps.
  const Limits lower{.memory_bytes = 128ull << 20,       // default 512M
                     .pids = 64,                         // default 256
                     .cpus = 0.5,                        // default 1
                     .cpu_timeout = absl::Seconds(5),    // default 30s
                     .wall_timeout = absl::Seconds(10),  // default 60s
                     .tmpfs_bytes = 16ull << 20};        // default 64M
  SetEveryLimit(lower, &layer);
  ASSERT_TRUE(ApplyLayer(layer, LayerTrust::kProject, &policy).ok());
  ExpectLimits(policy.limits, lower);
  // Equal values are not an increase.
  PolicyLayer same = Layer(std::string(kProject));
  same.memory_bytes = 128ull << 20;
  EXPECT_TRUE(ApplyLayer(same, LayerTrust::kProject, &policy).ok());
}

TEST(ApplyLayerProjectTest, MayNotRaiseAnyLimit) {
  struct Case {
    void (*set)(PolicyLayer*);
    absl::string_view message;
  } cases[] = {
      {[](PolicyLayer* l) { l->memory_bytes = 1ull << 30; },
       "key \"limits.memory\": 1G is above 512M set by the layers below; a project policy may "
       "only lower limits"},
      {[](PolicyLayer* l) { l->pids = 257; }, "key \"limits.pids\": 257 is above 256"},
      {[](PolicyLayer* l) { l->cpus = 1.5; }, "key \"limits.cpus\": 1.5 is above 1"},
      {[](PolicyLayer* l) { l->cpu_timeout = absl::Seconds(31); },
       "key \"limits.cpuTimeout\": 31s is above 30s"},
      {[](PolicyLayer* l) { l->wall_timeout = absl::Minutes(2); },
       "key \"limits.wallTimeout\": 2m is above 1m"},
      {[](PolicyLayer* l) { l->tmpfs_bytes = 65ull << 20; },
       "key \"limits.tmpfsSize\": 65M is above 64M"},
  };
  for (const auto& c : cases) {
    Policy policy = TrustedBase();
    Policy before = policy;
    PolicyLayer layer = Layer(std::string(kProject));
    c.set(&layer);
    absl::Status status = ApplyLayer(layer, LayerTrust::kProject, &policy);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << c.message;
    EXPECT_THAT(Message(status),
                HasSubstr(absl::StrCat("policy file \"", kProject, "\": ", c.message)));
    ExpectLimits(policy.limits, before.limits);
  }
}

TEST(ApplyLayerProjectTest, MayNarrowAllowedDomains) {
  Policy policy = TrustedBase();
  PolicyLayer layer = Layer(std::string(kProject));
  layer.allowed_domains = {{"a.example.com", "*.b.example.com", "api.x.com:443", "pypi.org:443"}};
  ASSERT_TRUE(ApplyLayer(layer, LayerTrust::kProject, &policy).ok());
  EXPECT_THAT(Texts(policy.allowed_domains),
              ElementsAre("a.example.com", "*.b.example.com", "api.x.com:443", "pypi.org:443"));
  // And narrow to nothing.
  PolicyLayer none = Layer(std::string(kProject));
  none.allowed_domains.emplace();
  ASSERT_TRUE(ApplyLayer(none, LayerTrust::kProject, &policy).ok());
  EXPECT_THAT(policy.allowed_domains, IsEmpty());
}

TEST(ApplyLayerProjectTest, MayNotWidenAllowedDomains) {
  for (absl::string_view wanted :
       {"example.com", "evil.com", "api.x.com", "api.x.com:80", "www.x.com", "*.pypi.org"}) {
    Policy policy = TrustedBase();
    PolicyLayer layer = Layer(std::string(kProject));
    layer.allowed_domains = {{"a.example.com", std::string(wanted)}};
    absl::Status status = ApplyLayer(layer, LayerTrust::kProject, &policy);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << wanted;
    EXPECT_THAT(Message(status), HasSubstr("key \"network.allowedDomains\""));
    EXPECT_THAT(Message(status), HasSubstr(absl::StrCat("\"", wanted, "\" is not covered")));
    EXPECT_THAT(Message(status), HasSubstr("*.example.com, api.x.com:443, pypi.org"));
    EXPECT_THAT(Message(status), HasSubstr("~/.config/moat/policy.yaml"));
    EXPECT_EQ(policy.allowed_domains, TrustedBase().allowed_domains) << wanted;
  }
}

TEST(ApplyLayerProjectTest, AnyDomainIsAnErrorWhenNothingIsAllowed) {
  Policy policy;  // the default: no network
  PolicyLayer layer = Layer(std::string(kProject));
  layer.allowed_domains = {{"github.com"}};
  absl::Status status = ApplyLayer(layer, LayerTrust::kProject, &policy);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Message(status), HasSubstr("\"github.com\" is not allowed: the layers below allow "
                                         "no network access"));
}

TEST(ApplyLayerProjectTest, MayNarrowAllowWrite) {
  Policy policy = TrustedBase();
  PolicyLayer layer = Layer(std::string(kProject));
  layer.allow_write = {{"/repo/build", "/tmp/cache"}};
  ASSERT_TRUE(ApplyLayer(layer, LayerTrust::kProject, &policy).ok());
  EXPECT_THAT(policy.allow_write, ElementsAre("/repo/build", "/tmp/cache"));
}

TEST(ApplyLayerProjectTest, MayNotWidenAllowWrite) {
  for (absl::string_view wanted : {"/", "/home/u", "/repository", "/tmp", "/repo/../etc"}) {
    Policy policy = TrustedBase();
    PolicyLayer layer = Layer(std::string(kProject));
    layer.allow_write = {{std::string(wanted)}};
    absl::Status status = ApplyLayer(layer, LayerTrust::kProject, &policy);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << wanted;
    EXPECT_THAT(Message(status), HasSubstr("key \"filesystem.allowWrite\"")) << wanted;
    EXPECT_THAT(Message(status), HasSubstr("is not inside a path the layers below allow (/repo, "
                                           "/tmp/cache)"))
        << wanted;
    EXPECT_EQ(policy.allow_write, TrustedBase().allow_write);
  }
  Policy nothing;
  PolicyLayer layer = Layer(std::string(kProject));
  layer.allow_write = {{"/repo"}};
  EXPECT_THAT(Message(ApplyLayer(layer, LayerTrust::kProject, &nothing)),
              HasSubstr("the layers below allow writing nowhere"));
}

TEST(ApplyLayerProjectTest, MayOnlyHideTheHome) {
  Policy policy;
  policy.hide_home = false;  // a trusted layer showed it
  PolicyLayer hide = Layer(std::string(kProject));
  hide.hide_home = true;
  ASSERT_TRUE(ApplyLayer(hide, LayerTrust::kProject, &policy).ok());
  EXPECT_TRUE(policy.hide_home);

  PolicyLayer show = Layer(std::string(kProject));
  show.hide_home = false;
  absl::Status status = ApplyLayer(show, LayerTrust::kProject, &policy);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Message(status), HasSubstr("key \"filesystem.hideHome\""));
  EXPECT_TRUE(policy.hide_home);
}

TEST(ApplyLayerProjectTest, AFailedLayerChangesNothing) {
  Policy policy = TrustedBase();
  PolicyLayer layer = Layer(std::string(kProject));
  layer.memory_bytes = 1ull << 20;     // fine
  layer.denied_domains = {{"x.com"}};  // fine
  layer.env = {{"A", "1"}};            // fine
  layer.allow_write = {{"/etc"}};      // widening
  ASSERT_FALSE(ApplyLayer(layer, LayerTrust::kProject, &policy).ok());
  EXPECT_EQ(policy.limits.memory_bytes, Limits().memory_bytes);
  EXPECT_THAT(policy.denied_domains, IsEmpty());
  EXPECT_THAT(policy.env, IsEmpty());
  EXPECT_THAT(policy.sources, IsEmpty());
}

// ---------------------------------------------------------------------------------------------
// Defaults and mandatory protections

TEST(ApplyLayerTest, TrustedLayerSetsEgressKeys) {
  Policy policy;
  PolicyLayer layer = Layer("/etc/moat.yaml");
  layer.allowed_cidrs = {{"127.0.0.0/8", "fd00::/8"}};
  layer.dns_servers = {{"127.0.0.1:5353"}};
  layer.max_request_body_bytes = 1024;
  layer.requests_per_minute = 5;
  layer.transparent = true;
  ASSERT_TRUE(ApplyLayer(layer, LayerTrust::kTrusted, &policy).ok());
  EXPECT_THAT(Texts(policy.allowed_cidrs), ElementsAre("127.0.0.0/8", "fd00::/8"));
  EXPECT_THAT(Texts(policy.dns_servers), ElementsAre("127.0.0.1:5353"));
  EXPECT_EQ(policy.egress.max_request_body_bytes, 1024u);
  EXPECT_EQ(policy.egress.requests_per_minute, 5u);
  EXPECT_TRUE(policy.transparent);

  PolicyLayer bad = Layer("/etc/moat.yaml");
  bad.dns_servers = std::vector<std::string>{};
  EXPECT_THAT(Message(ApplyLayer(bad, LayerTrust::kTrusted, &policy)),
              HasSubstr("network.dnsServers"));
}

TEST(ApplyLayerProjectTest, MayNarrowEgressButNotWidenIt) {
  Policy base;
  base.allowed_cidrs = Cidrs({"10.0.0.0/8"});
  base.dns_servers = DnsServers({"127.0.0.1:53", "127.0.0.2:53"});
  base.transparent = true;

  PolicyLayer narrow = Layer(std::string(kProject));
  narrow.allowed_cidrs = {{"10.2.0.0/16"}};
  narrow.dns_servers = {{"127.0.0.2"}};
  narrow.max_request_body_bytes = 1024;
  narrow.requests_per_minute = 10;
  narrow.transparent = false;
  Policy policy = base;
  ASSERT_TRUE(ApplyLayer(narrow, LayerTrust::kProject, &policy).ok());
  EXPECT_THAT(Texts(policy.allowed_cidrs), ElementsAre("10.2.0.0/16"));
  EXPECT_THAT(Texts(policy.dns_servers), ElementsAre("127.0.0.2:53"));
  EXPECT_FALSE(policy.transparent);

  struct Case {
    const char* name;
    std::function<void(PolicyLayer&)> set;
    const char* key;
  } cases[] = {
      {"wider range", [](PolicyLayer& l) { l.allowed_cidrs = {{"0.0.0.0/0"}}; },
       "network.allowedCidrs"},
      {"range outside", [](PolicyLayer& l) { l.allowed_cidrs = {{"169.254.169.254"}}; },
       "network.allowedCidrs"},
      {"other resolver", [](PolicyLayer& l) { l.dns_servers = {{"192.0.2.53"}}; },
       "network.dnsServers"},
      {"bigger body", [](PolicyLayer& l) { l.max_request_body_bytes = 1ull << 40; },
       "network.maxRequestBodyBytes"},
      {"faster rate", [](PolicyLayer& l) { l.requests_per_minute = 100000; },
       "network.requestsPerMinute"},
  };
  for (const Case& c : cases) {
    PolicyLayer layer = Layer(std::string(kProject));
    c.set(layer);
    Policy p = base;
    absl::Status s = ApplyLayer(layer, LayerTrust::kProject, &p);
    EXPECT_FALSE(s.ok()) << c.name;
    EXPECT_THAT(Message(s), HasSubstr(c.key)) << c.name;
    EXPECT_EQ(p.allowed_cidrs, base.allowed_cidrs) << c.name;
  }

  // With nothing set below, a project may neither open ranges, pick resolvers nor turn on
  // transparent mode.
  Policy closed;
  PolicyLayer cidrs = Layer(std::string(kProject));
  cidrs.allowed_cidrs = {{"127.0.0.1"}};
  EXPECT_FALSE(ApplyLayer(cidrs, LayerTrust::kProject, &closed).ok());
  PolicyLayer dns = Layer(std::string(kProject));
  dns.dns_servers = {{"127.0.0.1"}};
  EXPECT_THAT(Message(ApplyLayer(dns, LayerTrust::kProject, &closed)),
              HasSubstr("would replace the host's resolvers"));
  PolicyLayer transparent = Layer(std::string(kProject));
  transparent.transparent = true;
  EXPECT_THAT(Message(ApplyLayer(transparent, LayerTrust::kProject, &closed)),
              HasSubstr("network.transparent"));
}

TEST(DefaultPolicyTest, IsClosedByDefault) {
  Policy policy = DefaultPolicy(PathContext{.home = "/home/u", .cwd = "/repo"});
  ExpectLimits(policy.limits, {.memory_bytes = 512ull << 20,
                               .pids = 256,
                               .cpus = 1.0,
                               .cpu_timeout = absl::Seconds(30),
                               .wall_timeout = absl::Seconds(60),
                               .tmpfs_bytes = 64ull << 20});
  EXPECT_THAT(policy.allowed_domains, IsEmpty());
  EXPECT_THAT(policy.allow_write, IsEmpty());
  EXPECT_TRUE(policy.hide_home);
  EXPECT_THAT(policy.deny_read, Contains("/home/u/.ssh"));
  EXPECT_THAT(policy.deny_read, Contains("/home/u/.aws"));
  EXPECT_THAT(policy.sources, IsEmpty());
  EXPECT_THAT(DefaultPolicy(PathContext{.home = "", .cwd = "/repo"}).deny_read, IsEmpty());
}

TEST(MandatoryDenyWriteTest, ProtectsGitAndEditorFilesUnderEachRoot) {
  Policy policy;
  policy.allow_write = {"/repo", "/data"};
  std::vector<std::string> extra = MandatoryDenyWrite(policy, PathContext{.home = "/home/u"});
  EXPECT_THAT(extra, Contains("/repo/.git/hooks"));
  EXPECT_THAT(extra, Contains("/repo/.git/config"));
  EXPECT_THAT(extra, Contains("/repo/.vscode"));
  EXPECT_THAT(extra, Contains("/data/.git/hooks"));
  // The home is not writable here, so its files are not listed.
  EXPECT_THAT(extra, Not(Contains("/home/u/.bashrc")));
}

TEST(MandatoryDenyWriteTest, ProtectsStartupFilesAndMoatConfigWhenTheHomeIsWritable) {
  Policy policy;
  policy.allow_write = {"/home"};
  std::vector<std::string> extra = MandatoryDenyWrite(policy, PathContext{.home = "/home/u"});
  EXPECT_THAT(extra, Contains("/home/u/.bashrc"));
  EXPECT_THAT(extra, Contains("/home/u/.gitconfig"));
  EXPECT_THAT(extra, Contains("/home/u/.ssh"));
  EXPECT_THAT(extra, Contains("/home/u/.config/moat"));

  Policy config_only;
  config_only.allow_write = {"/home/u/.config"};
  EXPECT_THAT(MandatoryDenyWrite(config_only, PathContext{.home = "/home/u"}),
              Contains("/home/u/.config/moat"));
}

TEST(MandatoryDenyWriteTest, SkipsWhatIsAlreadyDenied) {
  Policy policy;
  policy.allow_write = {"/repo"};
  policy.deny_write = {"/repo/.git"};
  std::vector<std::string> extra = MandatoryDenyWrite(policy, PathContext{});
  EXPECT_THAT(extra, Not(Contains("/repo/.git/hooks")));
  EXPECT_THAT(extra, Not(Contains("/repo/.git/config")));
  EXPECT_THAT(extra, Contains("/repo/.idea"));
  EXPECT_THAT(MandatoryDenyWrite(Policy{}, PathContext{.home = "/home/u"}), IsEmpty());
}

// ---------------------------------------------------------------------------------------------
// ResolvePolicy with real files

class ResolvePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "moat_policy_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    home_ = root_ + "/home";
    cwd_ = root_ + "/repo";
    std::filesystem::create_directories(home_);
    std::filesystem::create_directories(cwd_);
    sources_.paths = PathContext{.home = home_, .cwd = cwd_};
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string Write(const std::string& path, absl::string_view text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string UserFile() { return home_ + "/.config/moat/policy.yaml"; }
  std::string MoatFile() { return cwd_ + "/.moat/policy.yaml"; }
  std::string PiFile() { return cwd_ + "/.pi/sandbox.json"; }

  std::string root_, home_, cwd_;
  PolicySources sources_;
};

TEST_F(ResolvePolicyTest, WithoutFilesGivesTheDefault) {
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_TRUE(policy.ok()) << policy.status();
  Policy expected = DefaultPolicy(sources_.paths);
  EXPECT_EQ(policy->limits.memory_bytes, expected.limits.memory_bytes);
  EXPECT_EQ(policy->deny_read, expected.deny_read);
  EXPECT_THAT(policy->allowed_domains, IsEmpty());
  EXPECT_THAT(policy->allow_write, IsEmpty());
  EXPECT_THAT(policy->deny_write, IsEmpty());
  EXPECT_THAT(policy->sources, IsEmpty());
}

TEST_F(ResolvePolicyTest, AppliesLayersInOrder) {
  Write(UserFile(), R"(
network:
  allowedDomains: ["*.github.com", "pypi.org"]
filesystem:
  allowWrite: ["."]
limits:
  memory: 2G
  pids: 500
env:
  LAYER: user
  USER_ONLY: "1"
)");
  Write(MoatFile(), R"(
network:
  allowedDomains: ["api.github.com", "pypi.org"]
limits:
  memory: 1G
env:
  LAYER: moat
)");
  Write(PiFile(), R"({
  "enabled": true,
  "network": {"allowedDomains": ["api.github.com"], "deniedDomains": ["evil.github.com"]},
  "filesystem": {"allowWrite": ["./build"], "denyWrite": [".env"]},
  "limits": {"memory": "256M"},
  "env": {"LAYER": "pi"}
})");
  std::string explicit_file = Write(root_ + "/explicit.json", R"({
  "limits": {"pids": 50, "cpus": 2},
  "env": {"LAYER": "explicit"}
})");
  sources_.explicit_file = explicit_file;
  sources_.flags.pids = 10;
  sources_.flags.env = {{"LAYER", "flags"}};

  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_THAT(policy->sources,
              ElementsAre(UserFile(), MoatFile(), PiFile(), explicit_file, "command line"));
  EXPECT_THAT(Texts(policy->allowed_domains), ElementsAre("api.github.com"));
  EXPECT_THAT(Texts(policy->denied_domains), ElementsAre("evil.github.com"));
  EXPECT_THAT(policy->allow_write, ElementsAre(cwd_ + "/build"));
  EXPECT_THAT(policy->deny_write, Contains(cwd_ + "/.env"));
  EXPECT_EQ(policy->limits.memory_bytes, 256ull << 20);  // lowered twice by projects
  EXPECT_EQ(policy->limits.pids, 10u);                   // user 500, explicit 50, flags 10
  EXPECT_EQ(policy->limits.cpus, 2.0);                   // the explicit file is trusted
  EXPECT_THAT(policy->env, ElementsAre(Pair("LAYER", "flags"), Pair("USER_ONLY", "1")));
  // Mandatory protections follow the final allow list.
  EXPECT_THAT(policy->deny_write, Contains(cwd_ + "/build/.git/hooks"));
}

TEST_F(ResolvePolicyTest, TrustedLayersAfterTheProjectMayWidenAgain) {
  Write(MoatFile(), "limits: {memory: 64M}\n");
  sources_.flags.memory_bytes = 4ull << 30;
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->limits.memory_bytes, 4ull << 30);
}

TEST_F(ResolvePolicyTest, ProjectFileMayNotWidenTheUserFile) {
  Write(UserFile(), "network: {allowedDomains: [pypi.org]}\nlimits: {cpus: 1}\n");
  struct Case {
    std::string file;
    std::string text;
    absl::string_view message;
  } cases[] = {
      {MoatFile(), "network: {allowedDomains: [evil.com]}", "network.allowedDomains"},
      {MoatFile(), "limits: {cpus: 8}", "limits.cpus"},
      {MoatFile(), "filesystem: {allowWrite: [\"~\"]}", "filesystem.allowWrite"},
      {MoatFile(), "filesystem: {hideHome: false}", "filesystem.hideHome"},
      {PiFile(), R"({"network": {"allowedDomains": ["*.pypi.org"]}})", "network.allowedDomains"},
      {PiFile(), R"({"filesystem": {"allowWrite": ["."]}})", "filesystem.allowWrite"},
      {PiFile(), R"({"enabled": false})", "enabled"},
      {PiFile(), R"({"network": {"allowLocalBinding": true}})", "network.allowLocalBinding"},
  };
  for (const auto& c : cases) {
    Write(c.file, c.text);
    absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
    ASSERT_FALSE(policy.ok()) << c.text;
    EXPECT_THAT(Message(policy.status()), HasSubstr(absl::StrCat("policy file \"", c.file, "\"")))
        << c.text;
    EXPECT_THAT(Message(policy.status()), HasSubstr(absl::StrCat("key \"", c.message, "\"")))
        << c.text;
    std::filesystem::remove(c.file);
  }
}

TEST_F(ResolvePolicyTest, InvalidOrUnreadableFilesAreErrors) {
  Write(UserFile(), "limits: {memory: lots}\n");
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_FALSE(policy.ok());
  EXPECT_THAT(Message(policy.status()), HasSubstr(absl::StrCat("policy file \"", UserFile(),
                                                               "\", line 1: key "
                                                               "\"limits.memory\"")));
  std::filesystem::remove(UserFile());

  std::filesystem::create_directories(MoatFile());  // a directory where the file should be
  policy = ResolvePolicy(sources_);
  ASSERT_FALSE(policy.ok());
  EXPECT_THAT(Message(policy.status()), HasSubstr("not a regular file"));
}

TEST_F(ResolvePolicyTest, MissingExplicitFileIsAnError) {
  sources_.explicit_file = root_ + "/nope.yaml";
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(policy.status()), HasSubstr("nope.yaml"));
}

TEST_F(ResolvePolicyTest, DanglingProjectSymlinkCountsAsMissing) {
  std::filesystem::create_directories(cwd_ + "/.moat");
  std::filesystem::create_symlink(root_ + "/does-not-exist", MoatFile());
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_THAT(policy->sources, IsEmpty());
}

TEST_F(ResolvePolicyTest, FlagsWithoutSourceAreNamedCommandLine) {
  sources_.flags.cpus = 0;
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_FALSE(policy.ok());
  EXPECT_THAT(Message(policy.status()), ::testing::StartsWith("command line: key \"limits.cpus\""));
}

TEST_F(ResolvePolicyTest, RequiresAnAbsoluteWorkingDirectory) {
  sources_.paths.cwd = "relative";
  EXPECT_THAT(Message(ResolvePolicy(sources_).status()), HasSubstr("working directory"));
}

TEST_F(ResolvePolicyTest, UserFileIsSkippedWithoutAHome) {
  Write(UserFile(), "limits: {pids: 3}\n");
  sources_.paths.home = "";
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->limits.pids, 256u);
}

// --user-policy files are trusted (they may widen the user file) and sit below the project files
// (which may only tighten what they allow).
TEST_F(ResolvePolicyTest, UserPolicyFilesSitBetweenTheUserFileAndTheProject) {
  Write(UserFile(), "limits:\n  memory: 1G\n");
  std::string agent = Write(root_ + "/agent.json", R"({"filesystem": {"allowWrite": ["."]},
    "limits": {"memory": "2G"}})");
  Write(PiFile(), R"({"limits": {"memory": "768M"}})");
  sources_.user_files = {agent};
  PolicyOrigins origins;
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_, &origins);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_THAT(policy->sources, ElementsAre(UserFile(), agent, PiFile()));
  EXPECT_THAT(policy->allow_write, ElementsAre(cwd_));
  EXPECT_EQ(policy->limits.memory_bytes, 768ull << 20);
  EXPECT_EQ(origins.values["limits.memory"], PiFile());
  EXPECT_EQ(origins.values["limits.pids"], "built-in default");
  EXPECT_EQ(origins.elements["filesystem.allowWrite"][cwd_], agent);
  EXPECT_EQ(origins.elements["filesystem.denyWrite"][cwd_ + "/.pi"], "moat (protected path)");
  EXPECT_EQ(origins.elements["filesystem.denyRead"][home_ + "/.ssh"], "built-in default");

  // The project may not widen what the agent's file allows.
  Write(PiFile(), R"({"limits": {"memory": "4G"}})");
  EXPECT_EQ(ResolvePolicy(sources_).status().code(), absl::StatusCode::kPermissionDenied);
  // A named file that is missing is an error, not a silent default.
  sources_.user_files = {root_ + "/missing.json"};
  EXPECT_FALSE(ResolvePolicy(sources_).ok());
}

// The project directory is a writable root of its own: its agent configuration stays protected
// when a wider directory is writable.
TEST_F(ResolvePolicyTest, ProtectsTheProjectInsideAWiderWritableRoot) {
  sources_.flags.allow_write = std::vector<std::string>{root_};
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_TRUE(policy.ok()) << policy.status();
  for (const char* name : {"/.pi", "/.envrc", "/.git/hooks", "/.claude"}) {
    EXPECT_THAT(policy->deny_write, Contains(cwd_ + name));
    EXPECT_THAT(policy->deny_write, Contains(root_ + name));
  }
}

// What a pattern matches when the policy is resolved is denied by path; the notes say how files
// made later are treated. A project layer may add patterns (they only tighten).
TEST_F(ResolvePolicyTest, DenyPatternsAreExpandedAtStartAndExplained) {
  Write(cwd_ + "/certs/server.pem", "k");
  Write(cwd_ + "/deep/a/b/c/client.pem", "k");
  Write(cwd_ + "/.env.local", "e");
  Write(cwd_ + "/.hidden.pem", "dot files need a pattern that starts with a dot");
  Write(cwd_ + "/notes.txt", "n");
  Write(PiFile(), R"({"filesystem": {"denyWrite": ["*.pem", ".env.*"], "denyRead": ["./*.txt"]}})");
  absl::StatusOr<Policy> policy = ResolvePolicy(sources_);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_THAT(policy->deny_write, Contains(cwd_ + "/certs/server.pem"));
  EXPECT_THAT(policy->deny_write, Contains(cwd_ + "/deep/a/b/c/client.pem"));
  EXPECT_THAT(policy->deny_write, Contains(cwd_ + "/.env.local"));
  EXPECT_THAT(policy->deny_write, Not(Contains(cwd_ + "/.hidden.pem")));
  EXPECT_THAT(policy->deny_read, Contains(cwd_ + "/notes.txt"));
  EXPECT_THAT(policy->deny_write_patterns, ElementsAre(cwd_ + "/**/*.pem", cwd_ + "/**/.env.*"));
  ASSERT_EQ(policy->notes.size(), 3u);
  EXPECT_THAT(policy->notes[0], HasSubstr("1 path(s) matched at start and are hidden"));
  EXPECT_THAT(policy->notes[1], HasSubstr("2 path(s) matched"));
  EXPECT_THAT(policy->notes[1], HasSubstr("new files matching it are refused"));
}

}  // namespace
}  // namespace moat::sandbox
