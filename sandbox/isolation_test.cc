#include "sandbox/isolation.h"

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
using ::testing::Not;
using testing::Texts;

TEST(EgressOptionsForTest, CarriesEveryNetworkSettingOfThePolicy) {
  Policy policy;
  policy.allowed_domains = Domains({"pypi.org", "*.pythonhosted.org"});
  policy.denied_domains = Domains({"evil.pypi.org"});
  policy.allowed_cidrs = Cidrs({"10.1.0.0/16"});
  policy.dns_servers = DnsServers({"192.0.2.53:53"});
  policy.egress.max_request_body_bytes = 1234;
  policy.egress.requests_per_minute = 56;
  policy.transparent = true;
  egress::EgressOptions e = EgressOptionsFor(policy, "/var/log/audit.jsonl");
  EXPECT_THAT(Texts(e.allowed_domains), ElementsAre("pypi.org", "*.pythonhosted.org"));
  EXPECT_THAT(Texts(e.denied_domains), ElementsAre("evil.pypi.org"));
  EXPECT_THAT(Texts(e.allowed_cidrs), ElementsAre("10.1.0.0/16"));
  EXPECT_THAT(Texts(e.dns_servers), ElementsAre("192.0.2.53:53"));
  EXPECT_EQ(e.max_request_body_bytes, 1234u);
  EXPECT_EQ(e.requests_per_minute, 56u);
  EXPECT_TRUE(e.transparent);
  EXPECT_EQ(e.audit_log, "/var/log/audit.jsonl");
  EXPECT_TRUE(e.sandbox_id.empty());  // the caller's to set
  EXPECT_FALSE(e.observer);
}

// moat's own records are hidden from every sandbox, whoever prepares it: the egress state and audit
// log, and what the caller names private (the agent's state directory).
TEST(IsolationForTest, HidesMoatsRecordsAndTheAuditLog) {
  Policy policy;
  policy.allowed_domains = Domains({"pypi.org"});
  IsolationInputs inputs;
  inputs.host.proc_net_unix = "/dev/null";
  inputs.audit_log = "/var/log/moat-audit.jsonl";
  inputs.private_paths = {"/var/lib/moat-agent"};
  absl::StatusOr<Isolation> isolation = IsolationFor(policy, inputs);
  ASSERT_TRUE(isolation.ok()) << isolation.status();
  EXPECT_THAT(isolation->mounts.hidden_paths, Contains(std::string(egress::kStateDir)));
  EXPECT_THAT(isolation->mounts.hidden_paths, Contains("/var/log/moat-audit.jsonl"));
  EXPECT_THAT(isolation->mounts.hidden_paths, Contains("/var/lib/moat-agent"));
  ASSERT_TRUE(isolation->egress.has_value());
  EXPECT_EQ(isolation->egress->audit_log, "/var/log/moat-audit.jsonl");
}

// No allowed domain, no network: no proxy is planned, and the default audit log is used otherwise.
TEST(IsolationForTest, NoDomainMeansNoEgress) {
  IsolationInputs inputs;
  inputs.host.proc_net_unix = "/dev/null";
  absl::StatusOr<Isolation> isolation = IsolationFor(Policy{}, inputs);
  ASSERT_TRUE(isolation.ok()) << isolation.status();
  EXPECT_FALSE(isolation->egress.has_value());
  EXPECT_THAT(isolation->mounts.hidden_paths, Contains(std::string(egress::kStateDir)));

  Policy with_domain;
  with_domain.allowed_domains = Domains({"pypi.org"});
  isolation = IsolationFor(with_domain, inputs);
  ASSERT_TRUE(isolation.ok()) << isolation.status();
  ASSERT_TRUE(isolation->egress.has_value());
  EXPECT_EQ(isolation->egress->audit_log, egress::kDefaultAuditLog);
  EXPECT_THAT(isolation->mounts.hidden_paths, Not(Contains(std::string(egress::kDefaultAuditLog))));
}

}  // namespace
}  // namespace moat::sandbox
