#include "node-agent/service.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node-agent/backend/fake_backend.h"
#include "util/testing/temp_dir.h"

namespace moat::agent {
namespace {

using ::testing::HasSubstr;

// The service reads the profiles when it is made (its warm pool copies them): the config is
// complete before the service member is constructed.
AgentConfig TestConfig(const std::string& policy_path) {
  std::ofstream(policy_path) << "network:\n  allowedDomains: [pypi.org]\n";
  AgentConfig config;
  config.token_file = "/unused";
  ProfileConfig python;
  python.name = "python";
  python.root_dir = "/srv/roots/python";
  python.policy_file = policy_path;
  python.limits.pids = 100;
  python.pool_floor = 2;  // The pool runs only in tests that start it.
  python.pool_ceiling = 5;
  ProfileConfig broken;
  broken.name = "broken";
  broken.policy_file = "/nonexistent/policy.yaml";
  config.profiles = {python, broken};
  return config;
}

class ServiceTest : public ::testing::Test {
 protected:
  ScopedTempDir dir_;  // First: the config below writes its policy file in it.
  std::string policy_path_ = dir_.File("service_test_policy.yaml");
  AgentConfig config_ = TestConfig(policy_path_);
  FakeClock clock_;
  FakeBackend backend_;
  Registry registry_{&clock_};
  AgentMetrics metrics_{{"python", "broken"}};
  SandboxService service_{&config_, &backend_, &registry_, &metrics_, &clock_};
};

TEST_F(ServiceTest, CreatePassesTheProfileToTheBackend) {
  auto record = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(record.ok()) << record.status();
  SandboxSpec spec = backend_.SpecOf(record->id);
  EXPECT_EQ(spec.root_dir, "/srv/roots/python");
  EXPECT_THAT(spec.policy, HasSubstr("pypi.org"));  // The profile's default policy.
  EXPECT_EQ(spec.limits.pids, 100u);
  EXPECT_EQ(record->expires_at, clock_.Now() + config_.default_ttl);

  CreateRequest custom{"python"};
  custom.policy = R"({"network": {"allowedDomains": []}})";
  custom.limits.pids = 10;
  record = service_.Create(custom);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(backend_.SpecOf(record->id).policy, *custom.policy);
  EXPECT_EQ(backend_.SpecOf(record->id).limits.pids, 10u);
}

TEST_F(ServiceTest, CreateRefusesBadRequests) {
  CreateRequest too_many{"python"};
  too_many.limits.pids = 101;
  EXPECT_EQ(service_.Create(too_many).status().code(), absl::StatusCode::kInvalidArgument);
  CreateRequest long_ttl{"python"};
  long_ttl.ttl = config_.max_ttl + absl::Seconds(1);
  EXPECT_EQ(service_.Create(long_ttl).status().code(), absl::StatusCode::kInvalidArgument);
  auto broken = service_.Create(CreateRequest{"broken"});
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(broken.status().message(), HasSubstr("/nonexistent/policy.yaml"));
  EXPECT_EQ(backend_.live_sandboxes(), 0);
  EXPECT_EQ(registry_.size(), 0u);
}

TEST_F(ServiceTest, FailedCleanupKeepsTheRecordAsFailed) {
  auto record = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(record.ok());
  backend_.FailNextDestroy(absl::InternalError("umount: busy"));
  EXPECT_EQ(service_.Delete(record->id).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(registry_.Get(record->id)->state, SandboxState::kFailed);
  // A retry can still delete it.
  ASSERT_TRUE(service_.Delete(record->id).ok());
  EXPECT_EQ(registry_.size(), 0u);
}

TEST_F(ServiceTest, ASandboxThatLeftResidueStaysFailed) {
  auto record = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(record.ok());
  backend_.SetNextDestroyResidue({"mount namespace of sandbox x still used by pid 42"});
  auto report = service_.Delete(record->id);
  ASSERT_TRUE(report.ok()) << report.status();  // The report says what is left.
  EXPECT_FALSE(report->clean());
  auto kept = registry_.Get(record->id);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->state, SandboxState::kFailed);
  // Delete again once the residue is dealt with.
  ASSERT_TRUE(service_.Delete(record->id).ok());
  EXPECT_EQ(registry_.size(), 0u);
}

TEST_F(ServiceTest, RenewIsCappedByMaxTtl) {
  auto record = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(record.ok());
  EXPECT_TRUE(service_.Renew(record->id, clock_.Now() + config_.max_ttl).ok());
  EXPECT_EQ(
      service_.Renew(record->id, clock_.Now() + config_.max_ttl + absl::Seconds(1)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(ServiceTest, ExpiredSandboxesGoThroughTheRateLimitedQueue) {
  ASSERT_EQ(config_.recycle_per_second, 10);  // The default: 100 ms apart.
  for (int i = 0; i < 4; ++i) {
    CreateRequest request{"python"};
    request.ttl = absl::Seconds(5);
    ASSERT_TRUE(service_.Create(request).ok());
  }
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(service_.DeleteExpired(), 4);
  EXPECT_EQ(service_.DeleteExpired(), 0);  // Already queued.
  // The first goes at once, the other three wait their turn: the backlog shows them.
  EXPECT_THAT(service_.MetricsText(), ::testing::ContainsRegex("moat_recycle_backlog [234]"));
  ASSERT_TRUE(service_.WaitRecycled(absl::Seconds(10)));
  EXPECT_EQ(backend_.live_sandboxes(), 0);
  EXPECT_EQ(registry_.size(), 0u);
  EXPECT_THAT(service_.MetricsText(), HasSubstr("moat_recycle_backlog 0\n"));
  EXPECT_THAT(service_.MetricsText(), HasSubstr("moat_recycle_duration_seconds_count 4\n"));
}

TEST_F(ServiceTest, CleanLeftoversReportsWhatTheBackendFound) {
  CleanupReport left;
  left.mounts_unmounted = 2;
  backend_.AddLeftovers(left);
  auto report = service_.CleanLeftovers();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->mounts_unmounted, 2);
}

TEST_F(ServiceTest, TheProfilesDefaultsAreServedWarmEverythingElseCold) {
  service_.StartPool();
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  auto warm = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->start_path, StartPath::kWarm);
  EXPECT_EQ(warm->state, SandboxState::kReady);
  EXPECT_EQ(registry_.Get(warm->id)->start_path, StartPath::kWarm);
  EXPECT_THAT(backend_.SpecOf(warm->id).policy, HasSubstr("pypi.org"));
  EXPECT_EQ(warm->expires_at, clock_.Now() + config_.default_ttl);

  CreateRequest same{"python"};
  same.limits.pids = 100;  // The profile's own limit, spelled out: still its defaults.
  auto warm_too = service_.Create(same);
  ASSERT_TRUE(warm_too.ok()) << warm_too.status();
  EXPECT_EQ(warm_too->start_path, StartPath::kWarm);

  CreateRequest tighter{"python"};
  tighter.limits.pids = 10;
  auto cold = service_.Create(tighter);
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ(cold->start_path, StartPath::kCold);
  EXPECT_EQ(backend_.SpecOf(cold->id).limits.pids, 10u);

  CreateRequest custom{"python"};
  custom.policy = R"({"network": {"allowedDomains": []}})";
  auto cold_too = service_.Create(custom);
  ASSERT_TRUE(cold_too.ok()) << cold_too.status();
  EXPECT_EQ(cold_too->start_path, StartPath::kCold);
  EXPECT_EQ(backend_.SpecOf(cold_too->id).policy, *custom.policy);

  std::string text = service_.MetricsText();
  EXPECT_THAT(text, HasSubstr("moat_sandbox_start_seconds_count{path=\"warm\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("moat_sandbox_start_seconds_count{path=\"cold\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("moat_pool_misses_total{profile=\"python\"} 0\n"));
}

TEST_F(ServiceTest, AnEmptyPoolFallsBackToColdAndCountsAMiss) {
  // The pool is not started: it holds nothing.
  auto record = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->start_path, StartPath::kCold);
  CreateRequest custom{"python"};
  custom.policy = "{}";
  ASSERT_TRUE(service_.Create(custom).ok());  // Not one the pool could serve: no miss.
  std::string text = service_.MetricsText();
  EXPECT_THAT(text, HasSubstr("moat_pool_misses_total{profile=\"python\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("moat_sandbox_start_seconds_count{path=\"cold\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("moat_sandbox_start_seconds_count{path=\"warm\"} 0\n"));
}

TEST_F(ServiceTest, MetricsShowPoolDepthAndTargetPerProfile) {
  EXPECT_THAT(service_.MetricsText(), HasSubstr("moat_pool_depth{profile=\"python\"} 0\n"));
  service_.StartPool();
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  std::string text = service_.MetricsText();
  EXPECT_THAT(text, HasSubstr("moat_pool_depth{profile=\"python\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("moat_pool_target{profile=\"python\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("moat_pool_depth{profile=\"broken\"} 0\n"));  // No pool.
  EXPECT_THAT(text, HasSubstr("moat_pool_target{profile=\"broken\"} 0\n"));
}

TEST_F(ServiceTest, AUsedWarmSandboxIsRecycledAndThePoolRefilledWithNewOnes) {
  service_.StartPool();
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  auto record = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(record.ok());
  ASSERT_EQ(record->start_path, StartPath::kWarm);
  ASSERT_TRUE(service_.Delete(record->id).ok());
  EXPECT_FALSE(backend_.Exists(record->id));
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(service_.pool().Stats("python").depth, 2);
  EXPECT_EQ(backend_.live_sandboxes(), 2);
  EXPECT_EQ(backend_.create_calls(), 3);  // A new one replaced the one taken.
}

TEST_F(ServiceTest, ACompromisedWarmSandboxLeavesThePoolWhichRefillsAtOnce) {
  service_.StartPool();
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  std::vector<std::string> warm = backend_.ids();
  ASSERT_EQ(warm.size(), 2u);
  service_.ReportCompromised(warm[0], "probe: 3 heartbeats missed");
  EXPECT_FALSE(backend_.Exists(warm[0]));
  // Not counted any more, and replaced without waiting for a Take to find it dead.
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  EXPECT_THAT(service_.MetricsText(), HasSubstr("moat_pool_depth{profile=\"python\"} 2\n"));
  EXPECT_EQ(backend_.live_sandboxes(), 2);
  EXPECT_EQ(backend_.create_calls(), 3);
  EXPECT_THAT(backend_.ids(), ::testing::Not(::testing::Contains(warm[0])));
  // The next create is served warm.
  auto record = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->start_path, StartPath::kWarm);
}

TEST_F(ServiceTest, AWarmSandboxWhoseInitEndedLeavesThePoolWhichRefillsAtOnce) {
  service_.StartPool();
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  std::vector<std::string> warm = backend_.ids();
  ASSERT_EQ(warm.size(), 2u);
  backend_.SetAlive(warm[1], false);
  service_.ReportExited(warm[1], "killed by signal 9");
  ASSERT_TRUE(service_.WaitRecycled(absl::Seconds(10)));
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  EXPECT_FALSE(backend_.Exists(warm[1]));
  EXPECT_EQ(service_.pool().Stats("python").depth, 2);
  EXPECT_EQ(backend_.live_sandboxes(), 2);
  EXPECT_EQ(backend_.create_calls(), 3);
}

TEST_F(ServiceTest, StopPoolDestroysTheWarmSandboxesButNotTheUsersOnes) {
  service_.StartPool();
  ASSERT_TRUE(service_.pool().WaitIdle(absl::Seconds(10)));
  auto record = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(record.ok());
  service_.StopPool();
  EXPECT_THAT(backend_.ids(), ::testing::ElementsAre(record->id));
  auto after = service_.Create(CreateRequest{"python"});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->start_path, StartPath::kCold);
}

// At start: the sandboxes the backend re-adopted are served again when the store has their
// record and they have time left (token, env, expiry kept); the others are destroyed, and
// records of sandboxes nobody adopted are dropped.
TEST_F(ServiceTest, ReadoptServesRecordedSandboxesAndEndsTheRest) {
  absl::StatusOr<SandboxStore> store = SandboxStore::Open(dir_.File("entries"));
  ASSERT_TRUE(store.ok()) << store.status();
  service_.SetStore(&*store);
  for (const char* id : {"sb-kept", "sb-expired", "sb-unrecorded"}) {
    SandboxSpec spec;
    spec.id = id;
    spec.profile = "python";
    ASSERT_TRUE(backend_.Create(spec).ok());
  }
  SandboxRecord kept;
  kept.id = "sb-kept";
  kept.profile = "python";
  kept.created = clock_.Now() - absl::Minutes(5);
  kept.expires_at = clock_.Now() + absl::Minutes(10);
  kept.env = {{"A", "1"}};
  kept.token = "kept-token";
  ASSERT_TRUE(store->Save(kept).ok());
  SandboxRecord expired = kept;
  expired.id = "sb-expired";
  expired.expires_at = clock_.Now() - absl::Seconds(1);
  ASSERT_TRUE(store->Save(expired).ok());
  SandboxRecord gone = kept;
  gone.id = "sb-gone";  // its init ended: the backend did not adopt it
  ASSERT_TRUE(store->Save(gone).ok());
  backend_.SetAdoptable({{.id = "sb-kept", .commands = {{.command_id = "cmd-1", .tag = "t"}}},
                         {.id = "sb-expired"},
                         {.id = "sb-unrecorded"}});

  std::vector<AdoptedSandboxInfo> served = service_.Readopt();
  ASSERT_EQ(served.size(), 1u);
  EXPECT_EQ(served[0].id, "sb-kept");
  ASSERT_EQ(served[0].commands.size(), 1u);
  EXPECT_EQ(served[0].commands[0].tag, "t");
  absl::StatusOr<SandboxRecord> record = service_.Get("sb-kept");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, SandboxState::kReady);
  EXPECT_EQ(record->created, kept.created);
  EXPECT_EQ(record->expires_at, kept.expires_at);
  EXPECT_EQ(record->env, kept.env);
  EXPECT_TRUE(service_.TokenMatches("sb-kept", "kept-token"));
  EXPECT_FALSE(service_.TokenMatches("sb-kept", "other"));
  EXPECT_EQ(backend_.ids(), std::vector<std::string>{"sb-kept"});
  EXPECT_FALSE(service_.Get("sb-expired").ok());
  EXPECT_EQ(store->Ids(), std::vector<std::string>{"sb-kept"});

  // A renewal reaches the record, and a delete removes it.
  ASSERT_TRUE(service_.Renew("sb-kept", clock_.Now() + absl::Minutes(20)).ok());
  EXPECT_EQ(store->Load("sb-kept")->expires_at, clock_.Now() + absl::Minutes(20));
  ASSERT_TRUE(service_.Delete("sb-kept").ok());
  EXPECT_TRUE(store->Ids().empty());
}

}  // namespace
}  // namespace moat::agent
