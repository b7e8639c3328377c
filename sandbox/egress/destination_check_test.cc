#include "sandbox/egress/destination_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/testing/fake_resolver.h"

namespace moat::egress {
namespace {

using Outcome = DestinationVerdict::Outcome;
using ::testing::HasSubstr;

EgressRules Rules(const std::vector<std::string>& allowed,
                  const std::vector<std::string>& denied = {}) {
  absl::StatusOr<EgressRules> rules = EgressRules::Parse(allowed, denied);
  EXPECT_TRUE(rules.ok()) << rules.status();
  return *rules;
}

CanonicalHost Host(absl::string_view raw) {
  absl::StatusOr<CanonicalHost> host = CanonicalizeHost(raw);
  EXPECT_TRUE(host.ok()) << raw << host.status();
  return *host;
}

struct Fixture : ::testing::Test {
  EgressRules rules = Rules({"ok.test", "*.pub.test", "127.0.0.1"}, {"bad.pub.test"});
  AddressPolicy public_only{{}, {}};
  AddressPolicy with_loopback{{*Cidr::Parse("127.0.0.0/8")}, {}};
  testing::FakeResolver resolver;
  RateLimiter limiter{0};
};

TEST_F(Fixture, AllowsTheFirstAddressThatPasses) {
  resolver.Set("ok.test", {"169.254.169.254", "127.0.0.5", "127.0.0.6"});
  DestinationCheck check(&rules, &with_loopback, &resolver, &limiter);
  const DestinationVerdict v = check.Check(Host("OK.test."), 80);
  EXPECT_EQ(v.outcome, Outcome::kAllowed);
  EXPECT_EQ(v.address->ToString(), "127.0.0.5");
  EXPECT_EQ(v.reason, "allowed by \"ok.test\"");
  EXPECT_EQ(resolver.calls("ok.test"), 1);
}

TEST_F(Fixture, RefusesWithTheFirstReasonWhenNoAddressPasses) {
  resolver.Set("ok.test", {"127.0.0.1", "169.254.169.254"});
  DestinationCheck check(&rules, &public_only, &resolver, &limiter);
  const DestinationVerdict v = check.Check(Host("ok.test"), 443);
  EXPECT_EQ(v.outcome, Outcome::kDenied);
  EXPECT_EQ(v.address->ToString(), "127.0.0.1");
  EXPECT_THAT(v.reason, HasSubstr("loopback"));
}

TEST_F(Fixture, DeniedNamesAreNeverResolved) {
  resolver.Set("bad.pub.test", {"192.0.2.1"});
  DestinationCheck check(&rules, &with_loopback, &resolver, &limiter);
  const DestinationVerdict v = check.Check(Host("bad.pub.test"), 443);
  EXPECT_EQ(v.outcome, Outcome::kDenied);
  EXPECT_THAT(v.reason, HasSubstr("deniedDomains"));
  EXPECT_EQ(check.Check(Host("elsewhere.test"), 443).outcome, Outcome::kDenied);
  EXPECT_EQ(resolver.total_calls(), 0);
}

TEST_F(Fixture, LiteralsSkipTheResolverButNotTheAddressPolicy) {
  DestinationCheck strict(&rules, &public_only, &resolver, &limiter);
  DestinationVerdict v = strict.Check(Host("2130706433"), 80);  // 127.0.0.1
  EXPECT_EQ(v.outcome, Outcome::kDenied);
  EXPECT_THAT(v.reason, HasSubstr("loopback"));
  DestinationCheck open(&rules, &with_loopback, &resolver, &limiter);
  v = open.Check(Host("0x7f.0.0.1"), 80);
  EXPECT_EQ(v.outcome, Outcome::kAllowed);
  EXPECT_EQ(v.address->ToString(), "127.0.0.1");
  EXPECT_EQ(resolver.total_calls(), 0);
}

TEST_F(Fixture, UnresolvableNames) {
  DestinationCheck check(&rules, &with_loopback, &resolver, &limiter);
  const DestinationVerdict v = check.Check(Host("a.pub.test"), 80);
  EXPECT_EQ(v.outcome, Outcome::kUnresolvable);
  EXPECT_THAT(v.reason, HasSubstr("cannot resolve \"a.pub.test\""));
  resolver.Set("b.pub.test", {});
  EXPECT_EQ(check.Check(Host("b.pub.test"), 80).outcome, Outcome::kUnresolvable);
}

TEST_F(Fixture, RateLimitAppliesOnlyToAllowedNames) {
  resolver.Set("ok.test", {"127.0.0.1"});
  RateLimiter two(2);
  DestinationCheck check(&rules, &with_loopback, &resolver, &two);
  EXPECT_EQ(check.Check(Host("denied.test"), 80).outcome, Outcome::kDenied);
  EXPECT_EQ(check.Check(Host("ok.test"), 80).outcome, Outcome::kAllowed);
  EXPECT_EQ(check.Check(Host("ok.test"), 80).outcome, Outcome::kAllowed);
  const DestinationVerdict v = check.Check(Host("ok.test"), 80);
  EXPECT_EQ(v.outcome, Outcome::kRateLimited);
  EXPECT_THAT(v.reason, HasSubstr("requestsPerMinute (2)"));
  EXPECT_EQ(resolver.calls("ok.test"), 2);  // the limited request was not resolved
}

}  // namespace
}  // namespace moat::egress
