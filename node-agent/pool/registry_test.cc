#include "node-agent/pool/registry.h"

#include <string>

#include "gtest/gtest.h"

namespace moat::agent {
namespace {

SandboxRecord Record(const std::string& id, absl::Time expires_at) {
  SandboxRecord r;
  r.id = id;
  r.profile = "default";
  r.state = SandboxState::kReady;
  r.expires_at = expires_at;
  r.token = "token-of-" + id;
  return r;
}

class RegistryTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  Registry registry_{&clock_};
};

TEST_F(RegistryTest, InsertGetListRemove) {
  ASSERT_TRUE(registry_.Insert(Record("sb-b", clock_.Now() + absl::Minutes(1))).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(registry_.Insert(Record("sb-a", clock_.Now() + absl::Minutes(1))).ok());
  EXPECT_EQ(registry_.Insert(Record("sb-a", clock_.Now())).code(),
            absl::StatusCode::kAlreadyExists);

  auto got = registry_.Get("sb-a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->created, clock_.Now());
  auto all = registry_.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, "sb-b");  // Older first.
  EXPECT_EQ(all[1].id, "sb-a");

  EXPECT_TRUE(registry_.Remove("sb-b").ok());
  EXPECT_EQ(registry_.Get("sb-b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_.Remove("sb-b").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_.size(), 1u);
}

TEST_F(RegistryTest, ExpiresOnlyAfterTheTtl) {
  ASSERT_TRUE(registry_.Insert(Record("sb-short", clock_.Now() + absl::Seconds(10))).ok());
  ASSERT_TRUE(registry_.Insert(Record("sb-long", clock_.Now() + absl::Seconds(60))).ok());
  clock_.Advance(absl::Seconds(9));
  EXPECT_TRUE(registry_.TakeExpired().empty());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(registry_.TakeExpired(), std::vector<std::string>{"sb-short"});
  EXPECT_EQ(registry_.Get("sb-short")->state, SandboxState::kRecycling);
  // Taken once: a sandbox being recycled is not handed out again.
  EXPECT_TRUE(registry_.TakeExpired().empty());
  EXPECT_EQ(registry_.Get("sb-long")->state, SandboxState::kReady);
}

TEST_F(RegistryTest, RenewPushesExpiryBack) {
  ASSERT_TRUE(registry_.Insert(Record("sb-x", clock_.Now() + absl::Seconds(10))).ok());
  clock_.Advance(absl::Seconds(8));
  auto renewed = registry_.Renew("sb-x", clock_.Now() + absl::Seconds(30));
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(*renewed, clock_.Now() + absl::Seconds(30));
  clock_.Advance(absl::Seconds(20));
  EXPECT_TRUE(registry_.TakeExpired().empty());  // The old expiry has passed; the new one not.
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(registry_.TakeExpired(), std::vector<std::string>{"sb-x"});
}

TEST_F(RegistryTest, RenewRefusesThePastAndRecyclingSandboxes) {
  ASSERT_TRUE(registry_.Insert(Record("sb-x", clock_.Now() + absl::Seconds(10))).ok());
  EXPECT_EQ(registry_.Renew("sb-x", clock_.Now()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Renew("sb-nope", clock_.Now() + absl::Hours(1)).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry_.BeginRecycle("sb-x").ok());
  EXPECT_EQ(registry_.Renew("sb-x", clock_.Now() + absl::Hours(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry_.BeginRecycle("sb-x").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RegistryTest, StateChangesAreCounted) {
  ASSERT_TRUE(registry_.Insert(Record("sb-1", clock_.Now() + absl::Hours(1))).ok());
  ASSERT_TRUE(registry_.Insert(Record("sb-2", clock_.Now() + absl::Hours(1))).ok());
  clock_.Advance(absl::Seconds(3));
  ASSERT_TRUE(registry_.SetState("sb-2", SandboxState::kRunning).ok());
  EXPECT_EQ(registry_.Get("sb-2")->last_transition, clock_.Now());
  auto counts = registry_.CountByState();
  EXPECT_EQ(counts[SandboxState::kReady], 1);
  EXPECT_EQ(counts[SandboxState::kRunning], 1);
  EXPECT_EQ(counts[SandboxState::kFailed], 0);
  EXPECT_EQ(counts.size(), std::size(kAllStates));
  EXPECT_EQ(registry_.SetState("sb-9", SandboxState::kReady).code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, TokensMatchOnlyTheirSandbox) {
  ASSERT_TRUE(registry_.Insert(Record("sb-1", clock_.Now() + absl::Hours(1))).ok());
  ASSERT_TRUE(registry_.Insert(Record("sb-2", clock_.Now() + absl::Hours(1))).ok());
  EXPECT_TRUE(registry_.TokenMatches("sb-1", "token-of-sb-1"));
  EXPECT_FALSE(registry_.TokenMatches("sb-1", "token-of-sb-2"));
  EXPECT_FALSE(registry_.TokenMatches("sb-1", ""));
  EXPECT_FALSE(registry_.TokenMatches("sb-3", "token-of-sb-3"));
}

TEST_F(RegistryTest, CompareAndSetStateOnlyFromTheExpectedState) {
  SandboxRecord record = Record("sb-cas", clock_.Now() + absl::Minutes(1));
  record.state = SandboxState::kReady;
  ASSERT_TRUE(registry_.Insert(record).ok());
  EXPECT_TRUE(registry_.CompareAndSetState("sb-cas", SandboxState::kReady, SandboxState::kRunning));
  EXPECT_EQ(registry_.Get("sb-cas")->state, SandboxState::kRunning);
  // A delete began: the command's end must not put it back to ready.
  ASSERT_TRUE(registry_.BeginRecycle("sb-cas").ok());
  EXPECT_FALSE(
      registry_.CompareAndSetState("sb-cas", SandboxState::kRunning, SandboxState::kReady));
  EXPECT_EQ(registry_.Get("sb-cas")->state, SandboxState::kRecycling);
  EXPECT_FALSE(
      registry_.CompareAndSetState("sb-none", SandboxState::kReady, SandboxState::kRunning));
}

}  // namespace
}  // namespace moat::agent
