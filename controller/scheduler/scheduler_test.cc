#include "controller/scheduler/scheduler.h"

#include "absl/strings/str_cat.h"
#include "controller/testing/scheduler_inputs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller::scheduler {
namespace {

using testing::kGiB;
using testing::Node;

// This suite's requests count no pids.
SandboxRequest Request() { return testing::Request(/*pids=*/0); }

TEST(SchedulerTest, ReasonsCountEveryNodeThatDoesNotFit) {
  std::vector<NodeInfo> nodes = {Node("a"), Node("b"), Node("c", "aarch64")};
  nodes[0].allocated.memory = 7 * kGiB;
  nodes[1].allocated.memory = 7 * kGiB;
  Snapshot s = Snapshot::Of(nodes);
  SandboxRequest r = Request();
  r.arch = "x86_64";
  auto d = Scheduler().Schedule(s, r, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(d.status().message(), "0/3 nodes: 2 insufficient memory, 1 no amd64");
}

TEST(SchedulerTest, AWarmNodeWinsOverAnEmptierColdOne) {
  std::vector<NodeInfo> nodes = {Node("cold"), Node("warm")};
  nodes[1].allocated = {1, 4 * kGiB, 0};
  nodes[1].warm = {{"default", 1}};
  Snapshot s = Snapshot::Of(nodes);
  auto d = Scheduler().Schedule(s, Request(), 0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->node, "warm");
}

TEST(SchedulerTest, WithoutWarmNodesTheLeastAllocatedWins) {
  std::vector<NodeInfo> nodes = {Node("busy"), Node("idle"), Node("half")};
  nodes[0].allocated = {6, 6 * kGiB, 0};
  nodes[2].allocated = {3, 3 * kGiB, 0};
  Snapshot s = Snapshot::Of(nodes);
  auto d = Scheduler().Schedule(s, Request(), 0);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->node, "idle");
  EXPECT_EQ(d->evaluated, 3);
}

TEST(SchedulerTest, ExcludedNodesAreSkippedForRetries) {
  Snapshot s = Snapshot::Of({Node("a"), Node("b")});
  SandboxRequest r = Request();
  r.excluded_nodes = {"a"};
  auto d = Scheduler().Schedule(s, r, 0);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->node, "b");
  r.excluded_nodes = {"a", "b"};
  d = Scheduler().Schedule(s, r, 0);
  EXPECT_EQ(d.status().message(), "0/2 nodes: 2 failed this request before");
}

TEST(SchedulerTest, BestOfKStopsAfterKFeasibleNodes) {
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < 1000; ++i) nodes.push_back(Node(absl::StrCat("n", i)));
  Snapshot s = Snapshot::Of(nodes);
  Scheduler scheduler(SchedulerOptions{.best_of_k = 5});
  auto d = scheduler.Schedule(s, Request(), 123);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->evaluated, 5);
  // The walk starts at seed % n: the chosen node is one of the 5 from there.
  EXPECT_GE(d->node_index, 123);
  EXPECT_LT(d->node_index, 128);
  // With every node but the last full, the walk goes all the way round to find it.
  for (int i = 0; i < 999; ++i) nodes[i].allocated.memory = 8 * kGiB;
  s = Snapshot::Of(nodes);
  d = scheduler.Schedule(s, Request(), 123);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->node, "n999");
}

TEST(SchedulerTest, AnEmptyFleetSaysSo) {
  auto d = Scheduler().Schedule(Snapshot{}, Request(), 0);
  EXPECT_THAT(std::string(d.status().message()), ::testing::HasSubstr("no node has joined"));
}

}  // namespace
}  // namespace moat::controller::scheduler
