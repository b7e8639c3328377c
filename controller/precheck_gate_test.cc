// The gate's decision for /v1/run-style callers (code and a language); the proxy path is in
// e2e/controller/tenants_test.cc.
#include "controller/precheck_gate.h"

#include <thread>

#include "controller/store/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller {
namespace {

class PrecheckGateTest : public ::testing::Test {
 protected:
  PrecheckGateTest() { config_.medium_policy = "no-network"; }
  PrecheckConfig config_;
  MemoryStore store_;
  FakeClock clock_;
  prometheus::Registry registry_;
  TenantMetrics metrics_{registry_};
  precheck::ApprovalQueue approvals_{&store_, &clock_, absl::Seconds(10), 4};
  PrecheckGate gate_{&config_, &approvals_, &metrics_};
};

TEST_F(PrecheckGateTest, LowRunsAsAskedAndMediumUnderTheStricterPolicy) {
  GateDecision low = gate_.Check("acme", "sb", "print(1)", precheck::Language::kPython);
  EXPECT_TRUE(low.status.ok());
  EXPECT_TRUE(low.policy.empty());
  GateDecision medium =
      gate_.Check("acme", "sb", "import os\nos.system('ls | wc -l')", precheck::Language::kPython);
  EXPECT_TRUE(medium.status.ok());
  EXPECT_EQ(medium.policy, "no-network");
  EXPECT_EQ(approvals_.AuditTrail(10)->size(), 1u);  // The medium run; the plain one has no tag.
}

TEST_F(PrecheckGateTest, HighWaitsForTheDecision) {
  GateDecision high;
  std::thread t([&] {
    high = gate_.Check("acme", "sb", "import base64\nexec(base64.b64decode(s))",
                       precheck::Language::kPython);
  });
  for (int i = 0; i < 2000 && approvals_.Pending().empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_FALSE(approvals_.Pending().empty());
  ASSERT_TRUE(approvals_.Decide(approvals_.Pending()[0].id, false, "admin", "no").ok());
  t.join();
  EXPECT_TRUE(absl::IsPermissionDenied(high.status)) << high.status;
  EXPECT_FALSE(high.approval_id.empty());
  EXPECT_THAT(high.verdict.Tags(), ::testing::Contains("decode-exec"));
}

}  // namespace
}  // namespace moat::controller
