#include "controller/nodes.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller {
namespace {

using scheduler::NodeState;
constexpr uint64_t kGiB = 1ULL << 30;

NodeReport Report() {
  NodeReport r;
  r.agent_url = "http://127.0.0.1:7070";
  r.agent_token = "0123456789abcdef0123";
  r.arch = "amd64";
  r.allocatable = {2, 8 * kGiB, 1000};
  r.profiles = {"default"};
  return r;
}

class NodeTableTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  NodeTable table_{&clock_, NodeTableOptions{absl::Seconds(5), 3, absl::Seconds(30), {}}};
};

TEST_F(NodeTableTest, ThreeMissedHeartbeatsMakeNotReadyAndTheGraceMakesLost) {
  auto session = table_.Join("n1", Report());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(table_.Get("n1")->report.arch, "x86_64");  // Normalised.
  clock_.Advance(absl::Seconds(14));
  EXPECT_TRUE(table_.Tick().empty());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kReady);
  clock_.Advance(absl::Seconds(1));  // 15 s: three intervals.
  EXPECT_TRUE(table_.Tick().empty());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kNotReady);
  // A heartbeat brings it back.
  ASSERT_TRUE(table_.Heartbeat("n1", *session, Report()).ok());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kReady);
  clock_.Advance(absl::Seconds(30));
  EXPECT_THAT(table_.Tick(), ::testing::ElementsAre("n1"));
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kLost);
  EXPECT_TRUE(table_.Tick().empty());  // Reported once.
  // A lost node must join again.
  EXPECT_TRUE(absl::IsNotFound(table_.Heartbeat("n1", *session, Report()).status()));
  ASSERT_TRUE(table_.Join("n1", Report()).ok());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kReady);
}

// An agent that restarts and leaves its sandboxes to the next one says for how long: the node
// takes nothing new meanwhile, and is not lost (its sandboxes given up) before that time is up.
TEST_F(NodeTableTest, AnAgentAwayForARestartIsNotReadyButNotLostUntilItsTimeIsUp) {
  auto session = table_.Join("n1", Report());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(table_.Heartbeat("n1", *session, Report(), absl::Seconds(60)).ok());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kNotReady);
  EXPECT_EQ(table_.Snapshot()->nodes.at(0)->state, NodeState::kNotReady);
  EXPECT_EQ(table_.Get("n1")->away_until, clock_.Now() + absl::Seconds(60));
  clock_.Advance(absl::Seconds(59));  // Past lost_after (30 s), within the 60 s.
  EXPECT_TRUE(table_.Tick().empty());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kNotReady);
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(table_.Tick(), ::testing::ElementsAre("n1"));
  EXPECT_EQ(table_.Get("n1")->away_until, absl::InfinitePast());

  // The next agent joins in time: Ready, and nothing of the absence is left.
  session = table_.Join("n1", Report());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(table_.Heartbeat("n1", *session, Report(), absl::Seconds(60)).ok());
  clock_.Advance(absl::Seconds(10));
  session = table_.Join("n1", Report());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kReady);
  EXPECT_EQ(table_.Get("n1")->away_until, absl::InfinitePast());
  clock_.Advance(absl::Seconds(30));  // lost_after again counts from its last heartbeat.
  EXPECT_THAT(table_.Tick(), ::testing::ElementsAre("n1"));

  // An absence shorter than lost_after does not shorten lost_after.
  session = table_.Join("n1", Report());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(table_.Heartbeat("n1", *session, Report(), absl::Seconds(5)).ok());
  clock_.Advance(absl::Seconds(29));
  EXPECT_TRUE(table_.Tick().empty());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kNotReady);
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(table_.Tick(), ::testing::ElementsAre("n1"));
}

// A replica that leads again after another led: its table is stale. Cleared, its nodes are
// not reported lost (which would fail their sandboxes with NODE_LOST): they join again.
TEST_F(NodeTableTest, ClearedNodesAreNotLostButJoinAgain) {
  auto session = table_.Join("n1", Report());
  ASSERT_TRUE(session.ok());
  clock_.Advance(absl::Minutes(5));  // Heartbeating to another replica meanwhile.
  table_.Clear();
  EXPECT_TRUE(table_.Tick().empty());
  EXPECT_FALSE(table_.Get("n1").has_value());
  EXPECT_TRUE(table_.Snapshot()->nodes.empty());
  EXPECT_TRUE(absl::IsNotFound(table_.Heartbeat("n1", *session, Report()).status()));
  ASSERT_TRUE(table_.Join("n1", Report()).ok());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kReady);
}

TEST_F(NodeTableTest, HeartbeatsNeedTheSessionOfTheLastJoin) {
  auto first = table_.Join("n1", Report());
  auto second = table_.Join("n1", Report());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(table_.Heartbeat("n1", *first, Report()).status()));
  EXPECT_TRUE(table_.Heartbeat("n1", *second, Report()).ok());
  EXPECT_TRUE(absl::IsNotFound(table_.Heartbeat("n2", *second, Report()).status()));
  EXPECT_TRUE(table_.Get("n1")->report.agent_token.empty());  // Views never show it.
  EXPECT_EQ(table_.Endpoint("n1")->token, "0123456789abcdef0123");
}

// A node joins without the agent's token; until a heartbeat brings it nothing can be sent to
// the agent, so nobody is told the node is Ready: not the scheduler, not the API, not the
// metrics (a client that waited for Ready then had its proxy call refused).
TEST_F(NodeTableTest, AJoinedNodeIsNotReadyUntilAHeartbeatBringsTheAgentsToken) {
  NodeReport joined = Report();
  joined.agent_token.clear();
  auto session = table_.Join("n1", joined);
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kNotReady);
  EXPECT_EQ(table_.List().at(0).state, NodeState::kNotReady);
  EXPECT_EQ(table_.Snapshot()->nodes.at(0)->state, NodeState::kNotReady);
  EXPECT_EQ((table_.CountByStateAndArch()[{"NotReady", "x86_64"}]), 1);
  EXPECT_TRUE(absl::IsUnavailable(table_.Endpoint("n1").status()));
  ASSERT_TRUE(table_.Heartbeat("n1", *session, Report()).ok());
  EXPECT_EQ(table_.Get("n1")->state, NodeState::kReady);
  EXPECT_EQ(table_.List().at(0).state, NodeState::kReady);
  EXPECT_EQ((table_.CountByStateAndArch()[{"Ready", "x86_64"}]), 1);
  EXPECT_TRUE(table_.Endpoint("n1").ok());
}

TEST_F(NodeTableTest, SnapshotsAreImmutableAndRebuiltOnlyOnChange) {
  ASSERT_TRUE(table_.Join("n1", Report()).ok());
  auto a = table_.Snapshot();
  EXPECT_EQ(table_.Snapshot(), a);  // Nothing changed: the same one.
  ASSERT_TRUE(table_.SetCordoned("n1", true).ok());
  auto b = table_.Snapshot();
  EXPECT_NE(a, b);
  EXPECT_FALSE(a->nodes[0]->cordoned);  // The old one is untouched.
  EXPECT_TRUE(b->nodes[0]->cordoned);
}

TEST_F(NodeTableTest, ReservationsNeverOverbookEvenFromStaleSnapshots) {
  NodeReport r = Report();
  r.allocatable = {1, 4 * kGiB, 0};  // CPU 4x: 4 one-CPU sandboxes; memory 1x: 2 of 2 GiB.
  ASSERT_TRUE(table_.Join("n1", r).ok());
  std::atomic<int> reserved{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (table_.Reserve("n1", "t", {1, 2 * kGiB, 0}).ok()) ++reserved;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(reserved, 2);
  EXPECT_THAT(std::string(table_.Reserve("n1", "t", {1, 2 * kGiB, 0}).message()),
              ::testing::HasSubstr("insufficient memory"));
  table_.Release("n1", "t", {1, 2 * kGiB, 0});
  EXPECT_TRUE(table_.Reserve("n1", "t", {1, 2 * kGiB, 0}).ok());
  EXPECT_EQ(table_.Snapshot()->nodes[0]->tenant_sandboxes.at("t"), 2);
}

TEST_F(NodeTableTest, CordonedAndDrainingNodesTakeNoReservation) {
  ASSERT_TRUE(table_.Join("n1", Report()).ok());
  ASSERT_TRUE(table_.SetDraining("n1").ok());
  EXPECT_TRUE(table_.Get("n1")->cordoned);
  EXPECT_FALSE(table_.Reserve("n1", "t", {1, 0, 0}).ok());
  ASSERT_TRUE(table_.SetCordoned("n1", false).ok());
  EXPECT_FALSE(table_.Get("n1")->draining);
  EXPECT_TRUE(table_.Reserve("n1", "t", {1, 0, 0}).ok());
  EXPECT_TRUE(absl::IsNotFound(table_.SetCordoned("nope", true)));
}

TEST_F(NodeTableTest, CountsByStateAndArch) {
  ASSERT_TRUE(table_.Join("n1", Report()).ok());
  NodeReport arm = Report();
  arm.arch = "arm64";
  ASSERT_TRUE(table_.Join("n2", arm).ok());
  EXPECT_TRUE(table_.AnyNodeHasArch("aarch64"));
  EXPECT_FALSE(table_.AnyNodeHasArch("riscv64"));
  auto counts = table_.CountByStateAndArch();
  EXPECT_EQ((counts[{"Ready", "x86_64"}]), 1);
  EXPECT_EQ((counts[{"Ready", "aarch64"}]), 1);
}

}  // namespace
}  // namespace moat::controller
