#include "sandbox/egress/rules.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::egress {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

CanonicalHost Host(absl::string_view raw) {
  absl::StatusOr<CanonicalHost> host = CanonicalizeHost(raw);
  EXPECT_TRUE(host.ok()) << raw << ": " << host.status();
  return host.ok() ? *host : CanonicalHost{"unused.invalid", std::nullopt};
}

EgressRules Rules(const std::vector<std::string>& allowed,
                  const std::vector<std::string>& denied = {}) {
  absl::StatusOr<EgressRules> rules = EgressRules::Parse(allowed, denied);
  EXPECT_TRUE(rules.ok()) << rules.status();
  return rules.ok() ? *rules : *EgressRules::Parse({}, {});
}

// A host and port, and what the rules must decide for them.
struct DecideCase {
  absl::string_view host;
  uint16_t port;
  bool allowed;
  absl::string_view reason;
};

void ExpectDecisions(const EgressRules& rules, std::initializer_list<DecideCase> cases) {
  for (const DecideCase& c : cases) {
    Decision d = rules.Decide(Host(c.host), c.port);
    EXPECT_EQ(d.allowed, c.allowed) << c.host << ":" << c.port;
    EXPECT_EQ(d.reason, c.reason) << c.host << ":" << c.port;
  }
}

TEST(EgressRulesTest, CreateRefusesBadEntriesNamingTheList) {
  absl::StatusOr<EgressRules> star = EgressRules::Parse({"*"}, {});
  ASSERT_FALSE(star.ok());
  EXPECT_THAT(star.status().message(), HasSubstr("network.allowedDomains"));

  absl::StatusOr<EgressRules> bad_deny = EgressRules::Parse({"example.com"}, {"bad_name.com"});
  ASSERT_FALSE(bad_deny.ok());
  EXPECT_THAT(bad_deny.status().message(), HasSubstr("network.deniedDomains"));

  // "*" is fine in a deny list.
  EXPECT_TRUE(EgressRules::Parse({"example.com"}, {"*"}).ok());
  EXPECT_TRUE(Rules({}).empty());
  EXPECT_FALSE(Rules({"example.com"}).empty());
}

TEST(EgressRulesTest, CreateRefusesADenyListsPatternInTheAllowList) {
  for (const char* wide : {"*", "*.com"}) {
    absl::StatusOr<sandbox::DomainPattern> pattern =
        sandbox::DomainPattern::Parse(wide, sandbox::DomainPattern::ListKind::kDeny);
    ASSERT_TRUE(pattern.ok()) << pattern.status();
    absl::StatusOr<EgressRules> rules = EgressRules::Create({*pattern}, {});
    EXPECT_FALSE(rules.ok()) << wide << " would open " << (wide[1] ? "a whole TLD" : "everything");
    EXPECT_TRUE(EgressRules::Create({}, {*pattern}).ok()) << "fine as a denial";
  }
}

TEST(EgressRulesTest, DecideWithWildcardsApexAndPorts) {
  EgressRules rules = Rules({"example.com", "*.pkg.example", "api.example.org:443", "192.0.2.7"});
  ExpectDecisions(
      rules, {{"example.com", 443, true, "allowed by \"example.com\""},
              {"EXAMPLE.com.", 8080, true, "allowed by \"example.com\""},
              {"www.example.com", 443, false, "not in allowedDomains"},
              {"files.pkg.example", 443, true, "allowed by \"*.pkg.example\""},
              {"a.b.pkg.example", 80, true, "allowed by \"*.pkg.example\""},
              {"pkg.example", 443, false, "not in allowedDomains"},  // a wildcard is not the apex
              {"evilpkg.example", 443, false, "not in allowedDomains"},
              {"api.example.org", 443, true, "allowed by \"api.example.org:443\""},
              {"api.example.org", 80, false, "not in allowedDomains"},
              {"192.0.2.7", 80, true, "allowed by \"192.0.2.7\""},
              {"0xc0.0.2.7", 80, true, "allowed by \"192.0.2.7\""},  // canonicalised first
              {"3221225991", 80, true, "allowed by \"192.0.2.7\""},
              {"192.0.2.8", 80, false, "not in allowedDomains"},
              {"example.com.evil.net", 443, false, "not in allowedDomains"}});
}

TEST(EgressRulesTest, DenyBeatsAllow) {
  EgressRules rules = Rules({"*.example.com", "example.com"},
                            {"evil.example.com", "*.internal.example.com", "example.com:25"});
  ExpectDecisions(
      rules,
      {{"good.example.com", 443, true, "allowed by \"*.example.com\""},
       {"evil.example.com", 443, false, "denied by deniedDomains entry \"evil.example.com\""},
       {"Evil.Example.Com.", 80, false, "denied by deniedDomains entry \"evil.example.com\""},
       {"sub.evil.example.com", 443, true, "allowed by \"*.example.com\""},
       {"db.internal.example.com", 5432, false,
        "denied by deniedDomains entry \"*.internal.example.com\""},
       {"internal.example.com", 443, true, "allowed by \"*.example.com\""},
       {"example.com", 25, false, "denied by deniedDomains entry \"example.com:25\""},
       {"example.com", 587, true, "allowed by \"example.com\""}});

  ExpectDecisions(Rules({"example.com"}, {"*"}),
                  {{"example.com", 443, false, "denied by deniedDomains entry \"*\""}});
}

TEST(EgressRulesTest, Ipv6LiteralsAreDeniedSayingWhy) {
  EgressRules rules = Rules({"example.com", "127.0.0.1"});
  for (absl::string_view raw : {"::1", "[2001:db8::1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]"}) {
    Decision d = rules.Decide(Host(raw), 443);
    EXPECT_FALSE(d.allowed) << raw;
    EXPECT_THAT(d.reason, HasSubstr("IPv6")) << raw;
    EXPECT_FALSE(rules.DecideName(Host(raw)).allowed) << raw;
  }
  // An IPv4-mapped literal is the IPv4 address, so the IPv4 entry applies to it.
  ExpectDecisions(rules, {{"[::ffff:127.0.0.1]", 80, true, "allowed by \"127.0.0.1\""}});
}

TEST(EgressRulesTest, NothingIsAllowedByEmptyLists) {
  EgressRules rules = Rules({});
  ExpectDecisions(rules, {{"example.com", 443, false, "not in allowedDomains"}});
  EXPECT_FALSE(rules.DecideName(Host("example.com")).allowed);
}

TEST(EgressRulesTest, DecideNameOpensANameWhenSomePortSurvives) {
  EgressRules rules =
      Rules({"example.com:443", "*.pkg.example", "mail.example:25", "both.example:25",
             "both.example:465"},
            {"bad.pkg.example", "mail.example:25", "*.pkg.example:8080", "both.example:25"});
  struct Case {
    absl::string_view host;
    bool allowed;
    absl::string_view reason;
  } cases[] = {
      {"example.com", true, "allowed by \"example.com:443\""},
      {"www.example.com", false, "not in allowedDomains"},
      {"files.pkg.example", true, "allowed by \"*.pkg.example\""},  // 8080 is denied, not others
      {"bad.pkg.example", false, "denied by deniedDomains entry \"bad.pkg.example\""},
      // The only allowed port is denied, so the name has nothing to resolve for.
      {"mail.example", false, "denied by deniedDomains entry \"mail.example:25\""},
      {"both.example", true, "allowed by \"both.example:465\""},
      {"unknown.example", false, "not in allowedDomains"},
  };
  for (const auto& c : cases) {
    Decision d = rules.DecideName(Host(c.host));
    EXPECT_EQ(d.allowed, c.allowed) << c.host;
    EXPECT_EQ(d.reason, c.reason) << c.host;
  }
}

TEST(EgressRulesTest, AllowedPorts) {
  EgressRules rules =
      Rules({"api.corp.example:8443", "api.corp.example:443", "api.corp.example:443",
             "*.corp.example:80", "open.corp.example", "mixed.corp.example:22"},
            {"api.corp.example:8443", "mixed.corp.example", "open.corp.example:25"});
  bool any = true;
  // 443 (listed twice, reported once), 80 from the wildcard; 8443 is denied.
  EXPECT_THAT(rules.AllowedPorts(Host("api.corp.example"), &any), ElementsAre(80, 443));
  EXPECT_FALSE(any);
  // The port-specific entry ("*.corp.example:80") and the port-less one both match: any port.
  EXPECT_THAT(rules.AllowedPorts(Host("open.corp.example"), &any), IsEmpty());
  EXPECT_TRUE(any);
  EXPECT_THAT(rules.AllowedPorts(Host("www.corp.example"), &any), ElementsAre(80));
  EXPECT_FALSE(any);
  // Denied outright: nothing, and not "any".
  EXPECT_THAT(rules.AllowedPorts(Host("mixed.corp.example"), &any), IsEmpty());
  EXPECT_FALSE(any);
  EXPECT_THAT(rules.AllowedPorts(Host("other.net"), &any), IsEmpty());
  EXPECT_FALSE(any);
  // The out-parameter may be left out.
  EXPECT_THAT(rules.AllowedPorts(Host("api.corp.example"), nullptr), ElementsAre(80, 443));
}

}  // namespace
}  // namespace moat::egress
