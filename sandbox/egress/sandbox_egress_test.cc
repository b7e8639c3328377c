#include "sandbox/egress/sandbox_egress.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::egress {
namespace {

using ::testing::ElementsAre;

TEST(EgressOptionsForTest, CarriesEveryNetworkSettingOfThePolicy) {
  sandbox::Policy policy;
  policy.allowed_domains = {"pypi.org", "*.pythonhosted.org"};
  policy.denied_domains = {"evil.pypi.org"};
  policy.allowed_cidrs = {"10.1.0.0/16"};
  policy.dns_servers = {"192.0.2.53:53"};
  policy.egress.max_request_body_bytes = 1234;
  policy.egress.requests_per_minute = 56;
  policy.transparent = true;
  EgressOptions e = EgressOptionsFor(policy, "/var/log/audit.jsonl");
  EXPECT_THAT(e.allowed_domains, ElementsAre("pypi.org", "*.pythonhosted.org"));
  EXPECT_THAT(e.denied_domains, ElementsAre("evil.pypi.org"));
  EXPECT_THAT(e.allowed_cidrs, ElementsAre("10.1.0.0/16"));
  EXPECT_THAT(e.dns_servers, ElementsAre("192.0.2.53:53"));
  EXPECT_EQ(e.max_request_body_bytes, 1234u);
  EXPECT_EQ(e.requests_per_minute, 56u);
  EXPECT_TRUE(e.transparent);
  EXPECT_EQ(e.audit_log, "/var/log/audit.jsonl");
  EXPECT_TRUE(e.sandbox_id.empty());  // the caller's to set
  EXPECT_FALSE(e.observer);
}

}  // namespace
}  // namespace moat::egress
