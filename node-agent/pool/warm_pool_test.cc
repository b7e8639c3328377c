#include "node-agent/pool/warm_pool.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node-agent/backend/fake_backend.h"
#include "util/testing/temp_dir.h"

namespace moat::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr absl::Duration kWait = absl::Seconds(10);  // Only a hang would reach it.

ProfileConfig Profile(const std::string& name, int floor, int ceiling) {
  ProfileConfig profile;
  profile.name = name;
  profile.root_dir = "/srv/roots/" + name;
  profile.limits.pids = 64;
  profile.limits.cpus = 1;
  profile.pool_floor = floor;
  profile.pool_ceiling = ceiling;
  return profile;
}

TEST(PoolTargetTest, FollowsPeakRateTimesRefillLatencyWithinFloorAndCeiling) {
  // The article's node: 4.2 s cold starts, a pool of 5 to 50.
  EXPECT_EQ(PoolTarget(0, absl::Milliseconds(4200), 5, 50), 5);
  EXPECT_EQ(PoolTarget(60, absl::Milliseconds(4200), 5, 50), 9);  // 2 x 1/s x 4.2 s = 8.4.
  EXPECT_EQ(PoolTarget(300, absl::Milliseconds(4200), 5, 50), 42);
  EXPECT_EQ(PoolTarget(600, absl::Milliseconds(4200), 5, 50), 50);
  EXPECT_EQ(PoolTarget(600, absl::ZeroDuration(), 5, 50), 5);  // Latency not measured yet.
  EXPECT_EQ(PoolTarget(int64_t{1} << 60, absl::Hours(1), 5, 50), 50);
  EXPECT_EQ(PoolTarget(600, absl::Seconds(4), 0, 0), 0);
}

class WarmPoolTest : public ::testing::Test {
 protected:
  void MakePool(std::vector<ProfileConfig> profiles, WarmPoolOptions options = {}) {
    options.recheck = absl::Minutes(10);  // Tests wake the workers with Kick.
    pool_ = std::make_unique<WarmPool>(&backend_, &clock_, std::move(profiles), options,
                                       [this](const std::string& id) {
                                         {
                                           absl::MutexLock lock(&mu_);
                                           recycled_.push_back(id);
                                         }
                                         ASSERT_TRUE(backend_.Destroy(id).ok());
                                       });
  }
  void Settle() {
    pool_->Kick();
    ASSERT_TRUE(pool_->WaitIdle(kWait));
  }
  std::vector<std::string> recycled() {
    absl::MutexLock lock(&mu_);
    return recycled_;
  }
  // A user takes a sandbox and is done with it at once (it is destroyed, never pooled again).
  void TakeAndDestroy(const std::string& profile, int times) {
    for (int i = 0; i < times; ++i) {
      std::optional<std::string> id = pool_->Take(profile);
      if (id.has_value()) {
        ASSERT_TRUE(backend_.Destroy(*id).ok());
      }
    }
  }

  ScopedTempDir dir_;  // Outlives the pool, which reads policy files in it.
  FakeClock clock_;
  FakeBackend backend_;
  absl::Mutex mu_;
  std::vector<std::string> recycled_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WarmPool> pool_;  // Last: stops before what it uses.
};

TEST_F(WarmPoolTest, FillsEveryProfileToItsFloorAtStart) {
  std::string policy_path = dir_.File("warm_pool_test_policy.yaml");
  std::ofstream(policy_path) << "network:\n  allowedDomains: [pypi.org]\n";
  ProfileConfig python = Profile("python", 3, 10);
  python.policy_file = policy_path;
  MakePool({python, Profile("node", 2, 4), Profile("nopool", 0, 0)});
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  EXPECT_EQ(pool_->Stats("python").depth, 3);
  EXPECT_EQ(pool_->Stats("python").target, 3);
  EXPECT_EQ(pool_->Stats("node").depth, 2);
  EXPECT_THAT(pool_->Profiles(), ElementsAre("node", "python"));  // A ceiling of 0: no pool.
  EXPECT_EQ(pool_->Stats("nopool").target, 0);
  EXPECT_EQ(backend_.live_sandboxes(), 5);

  // Made like a cold sandbox of the profile: its root, default policy and limits.
  std::optional<std::string> id = pool_->Take("python");
  ASSERT_TRUE(id.has_value());
  SandboxSpec spec = backend_.SpecOf(*id);
  EXPECT_EQ(spec.profile, "python");
  EXPECT_EQ(spec.root_dir, "/srv/roots/python");
  EXPECT_THAT(spec.policy, HasSubstr("pypi.org"));
  EXPECT_EQ(spec.limits, python.limits);
  EXPECT_TRUE(IsValidSandboxId(*id));
  std::remove(policy_path.c_str());
}

TEST_F(WarmPoolTest, TakeIsServedWarmAndTriggersARefill) {
  MakePool({Profile("python", 2, 5)});
  EXPECT_EQ(pool_->Take("python"), std::nullopt);  // Not started: the caller goes cold.
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  ASSERT_EQ(backend_.create_calls(), 2);

  std::optional<std::string> first = pool_->Take("python");
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(backend_.Exists(*first));
  ASSERT_TRUE(pool_->WaitIdle(kWait));  // Take woke the workers; they refilled.
  EXPECT_EQ(backend_.create_calls(), 3);
  EXPECT_EQ(pool_->Stats("python").depth, 2);
  EXPECT_EQ(backend_.live_sandboxes(), 3);  // Two warm, one handed out.

  std::optional<std::string> second = pool_->Take("python");
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(*second, *first);
  EXPECT_EQ(pool_->Take("ruby"), std::nullopt);
  EXPECT_EQ(pool_->Stats("python").peak_per_minute, 3);  // Every request counted, and no other.
}

// A create starting its entrypoint holds the refill back while the profile has a sandbox left;
// the refill starts when the hold ends, and at once for a profile the take emptied.
TEST_F(WarmPoolTest, ARefillHoldDefersTheRefillWhileAReadySandboxIsLeft) {
  MakePool({Profile("python", 2, 5)});
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  ASSERT_EQ(backend_.create_calls(), 2);
  {
    WarmPool::RefillHold hold(pool_.get());
    ASSERT_TRUE(pool_->Take("python").has_value());
    ASSERT_TRUE(pool_->WaitIdle(kWait));
    EXPECT_EQ(backend_.create_calls(), 2) << "refilled beside the entrypoint's start";
    ASSERT_TRUE(pool_->Take("python").has_value());  // The last one: refilled regardless.
    ASSERT_TRUE(pool_->WaitIdle(kWait));
    EXPECT_EQ(backend_.create_calls(), 3);
  }
  ASSERT_TRUE(pool_->WaitIdle(kWait));  // The hold's end woke the workers.
  EXPECT_EQ(backend_.create_calls(), 4);
  EXPECT_EQ(pool_->Stats("python").depth, 2);
}

TEST_F(WarmPoolTest, GrowsWithTheRequestRateAndShrinksWhenItFalls) {
  // Each Create "takes" 2 s as far as the sizing knows, and 1 ms of real time.
  backend_.SetCreateTiming(absl::Seconds(2), absl::Milliseconds(1));
  WarmPoolOptions options;
  options.refill_concurrency = 2;
  MakePool({Profile("python", 2, 6)}, options);
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  EXPECT_EQ(pool_->Stats("python").target, 2);
  EXPECT_NEAR(absl::ToDoubleSeconds(pool_->Stats("python").refill_latency), 2.0, 1e-6);

  // 50 requests in a minute: 2 x 50/60 per second x 2 s = 3.3, so 4.
  TakeAndDestroy("python", 50);
  Settle();
  EXPECT_EQ(pool_->Stats("python").target, 4);
  EXPECT_EQ(pool_->Stats("python").depth, 4);

  // 150 in the minute: 10, above the ceiling.
  TakeAndDestroy("python", 100);
  Settle();
  EXPECT_EQ(pool_->Stats("python").target, 6);
  EXPECT_EQ(pool_->Stats("python").depth, 6);
  EXPECT_EQ(backend_.live_sandboxes(), 6);
  // Never above the ceiling: at most the six pooled and the one a user held at a time.
  EXPECT_LE(backend_.max_live_sandboxes(), 7);
  EXPECT_THAT(recycled(), IsEmpty());

  // The busy minute counts for an hour...
  clock_.Advance(absl::Minutes(59));
  Settle();
  EXPECT_EQ(pool_->Stats("python").target, 6);
  // ...then the pool shrinks back to the floor, the surplus recycled.
  clock_.Advance(absl::Minutes(1));
  Settle();
  EXPECT_EQ(pool_->Stats("python").target, 2);
  EXPECT_EQ(pool_->Stats("python").depth, 2);
  EXPECT_EQ(backend_.live_sandboxes(), 2);
  EXPECT_EQ(recycled().size(), 4u);
}

TEST_F(WarmPoolTest, AnEmptyFloorGrowsOnceRequestsCome) {
  MakePool({Profile("python", 0, 3)});
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  EXPECT_EQ(backend_.create_calls(), 0);
  EXPECT_EQ(pool_->Take("python"), std::nullopt);
  // One request a minute, at the assumed 1 s per Create: 2 x 1/60 x 1 = 0.03, so one.
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  EXPECT_EQ(pool_->Stats("python").target, 1);
  EXPECT_EQ(pool_->Stats("python").depth, 1);
  EXPECT_NE(pool_->Take("python"), std::nullopt);
}

TEST_F(WarmPoolTest, BackendFailuresBackOffAndDoNotSpin) {
  backend_.FailCreates(absl::UnavailableError("cgroup controller busy"));
  WarmPoolOptions options;
  options.initial_backoff = absl::Seconds(1);
  options.max_backoff = absl::Seconds(2);
  MakePool({Profile("python", 2, 5)}, options);
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  EXPECT_EQ(backend_.create_calls(), 1);  // One attempt, then the workers sleep.
  EXPECT_EQ(pool_->Stats("python").depth, 0);
  EXPECT_THAT(pool_->Stats("python").last_error, HasSubstr("cgroup controller busy"));

  Settle();  // Woken, but the second is not due yet.
  EXPECT_EQ(backend_.create_calls(), 1);
  clock_.Advance(absl::Milliseconds(999));
  Settle();
  EXPECT_EQ(backend_.create_calls(), 1);
  clock_.Advance(absl::Milliseconds(1));
  Settle();
  EXPECT_EQ(backend_.create_calls(), 2);  // Now waits 2 s.
  clock_.Advance(absl::Seconds(1));
  Settle();
  EXPECT_EQ(backend_.create_calls(), 2);
  clock_.Advance(absl::Seconds(1));
  Settle();
  EXPECT_EQ(backend_.create_calls(), 3);  // Capped at 2 s from here on.
  clock_.Advance(absl::Seconds(2));
  Settle();
  EXPECT_EQ(backend_.create_calls(), 4);
  EXPECT_EQ(backend_.live_sandboxes(), 0);

  backend_.FailCreates(absl::OkStatus());
  clock_.Advance(absl::Seconds(2));
  Settle();
  EXPECT_EQ(pool_->Stats("python").depth, 2);
  EXPECT_THAT(pool_->Stats("python").last_error, IsEmpty());
  EXPECT_EQ(backend_.create_calls(), 6);
}

TEST_F(WarmPoolTest, AFailingProfileDoesNotStopTheOthers) {
  ProfileConfig broken = Profile("broken", 2, 2);
  broken.policy_file = "/nonexistent/policy.yaml";
  MakePool({broken, Profile("python", 2, 2)});
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  EXPECT_EQ(pool_->Stats("python").depth, 2);
  EXPECT_EQ(pool_->Stats("broken").depth, 0);
  EXPECT_THAT(pool_->Stats("broken").last_error, HasSubstr("/nonexistent/policy.yaml"));
}

TEST_F(WarmPoolTest, ADeadWarmSandboxIsNotHandedOut) {
  MakePool({Profile("python", 2, 2)});
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  std::vector<std::string> warm = backend_.ids();
  ASSERT_EQ(warm.size(), 2u);
  backend_.SetAlive(warm[0], false);

  std::optional<std::string> first = pool_->Take("python");
  std::optional<std::string> second = pool_->Take("python");
  ASSERT_TRUE(first.has_value());
  EXPECT_NE(*first, warm[0]);
  if (second.has_value()) {
    EXPECT_NE(*second, warm[0]);
  }
  EXPECT_THAT(recycled(), ElementsAre(warm[0]));
  EXPECT_FALSE(backend_.Exists(warm[0]));

  // All dead (and no refill possible): nothing is handed out; the caller makes one cold.
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  ASSERT_EQ(pool_->Stats("python").depth, 2);
  backend_.FailCreates(absl::UnavailableError("node full"));
  for (const std::string& id : backend_.ids()) backend_.SetAlive(id, false);
  EXPECT_EQ(pool_->Take("python"), std::nullopt);
  EXPECT_EQ(recycled().size(), 3u);
}

TEST_F(WarmPoolTest, ShutdownLeavesNothingButWhatWasHandedOut) {
  WarmPoolOptions options;
  options.refill_concurrency = 2;
  MakePool({Profile("python", 3, 5), Profile("node", 2, 5)}, options);
  pool_->Start();
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  // The refill that Take starts is still in a slow Create when the pool stops.
  backend_.SetCreateTiming(absl::Milliseconds(1), absl::Milliseconds(50));
  ASSERT_EQ(backend_.create_calls(), 5);
  std::optional<std::string> taken = pool_->Take("python");
  ASSERT_TRUE(taken.has_value());
  ASSERT_TRUE(backend_.WaitCreateCalls(6, kWait));
  pool_->Shutdown();
  EXPECT_THAT(backend_.ids(), ElementsAre(*taken));  // The refill's sandbox too is gone.
  EXPECT_EQ(pool_->Take("python"), std::nullopt);
  EXPECT_EQ(pool_->Stats("python").depth, 0);
  pool_->Shutdown();  // Idempotent.
  pool_->Start();     // Not after a shutdown.
  ASSERT_TRUE(pool_->WaitIdle(kWait));
  EXPECT_THAT(backend_.ids(), ElementsAre(*taken));
}

}  // namespace
}  // namespace moat::agent
