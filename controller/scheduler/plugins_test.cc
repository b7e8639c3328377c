// Every filter and score plugin, as the pure function it is: one request, one node.
#include <memory>

#include "controller/scheduler/framework.h"
#include "controller/testing/scheduler_inputs.h"
#include "gtest/gtest.h"

namespace moat::controller::scheduler {
namespace {

using testing::kGiB;
using testing::Node;
using testing::Request;

Snapshot Fleet() { return Snapshot{}; }

TEST(NodeReadyFilterTest, OnlyReadyUncordonedNodesFit) {
  auto f = NewNodeReadyFilter();
  NodeInfo n = Node();
  EXPECT_TRUE(f->Filter(Request(), n, Fleet()).fits());
  n.state = NodeState::kNotReady;
  EXPECT_EQ(f->Filter(Request(), n, Fleet()).reason, "not ready");
  n.state = NodeState::kLost;
  EXPECT_EQ(f->Filter(Request(), n, Fleet()).reason, "not ready");
  n.state = NodeState::kReady;
  n.cordoned = true;
  EXPECT_EQ(f->Filter(Request(), n, Fleet()).reason, "cordoned");
}

TEST(ArchFilterTest, MatchesTheRequestedArchitectureOrAny) {
  auto f = NewArchFilter();
  SandboxRequest r = Request();
  EXPECT_TRUE(f->Filter(r, Node(), Fleet()).fits());  // No arch asked for.
  r.arch = "x86_64";
  EXPECT_TRUE(f->Filter(r, Node(), Fleet()).fits());
  r.arch = "aarch64";
  EXPECT_EQ(f->Filter(r, Node(), Fleet()).reason, "no arm64");
}

TEST(ResourcesFitFilterTest, CpuOvercommittedMemoryStrict) {
  auto f = NewResourcesFitFilter();
  Snapshot s;  // CPU 4x, memory 1x.
  NodeInfo n = Node();
  n.allocated = {7, 6 * kGiB, 0};  // 7 of 8 overcommitted cores, 6 of 8 GiB.
  EXPECT_TRUE(f->Filter(Request(), n, s).fits());
  n.allocated.cpu = 7.5;
  EXPECT_EQ(f->Filter(Request(), n, s).reason, "insufficient cpu");
  n.allocated.cpu = 0;
  n.allocated.memory = 6 * kGiB + 1;
  EXPECT_EQ(f->Filter(Request(), n, s).reason, "insufficient memory");
  s.overcommit.memory = 2;
  EXPECT_TRUE(f->Filter(Request(), n, s).fits());
}

TEST(ResourcesFitFilterTest, ExactFitAndPids) {
  Overcommit strict{1, 1, 1};
  NodeInfo n = Node();
  n.allocated = {1, 6 * kGiB, 900};
  EXPECT_TRUE(FitsResources({1, 2 * kGiB, 100}, n, strict).fits());  // Exactly full.
  EXPECT_EQ(FitsResources({1, 2 * kGiB, 101}, n, strict).reason, "insufficient pids");
  // The SDK's default request (1 CPU, 2 GiB) on a 2-core node: 2 strictly, 8 with CPU 4x.
  NodeInfo empty = Node();
  empty.allocatable.memory = 64 * kGiB;
  int strict_fit = 0, overcommitted_fit = 0;
  for (NodeInfo m = empty; FitsResources({1, 2 * kGiB, 0}, m, strict).fits(); ++strict_fit)
    m.allocated += {1, 2 * kGiB, 0};
  for (NodeInfo m = empty; FitsResources({1, 2 * kGiB, 0}, m, Overcommit{}).fits();
       ++overcommitted_fit)
    m.allocated += {1, 2 * kGiB, 0};
  EXPECT_EQ(strict_fit, 2);
  EXPECT_EQ(overcommitted_fit, 8);
}

TEST(ProfilePresentFilterTest, TheAgentMustServeTheProfile) {
  auto f = NewProfilePresentFilter();
  SandboxRequest r = Request();
  EXPECT_TRUE(f->Filter(r, Node(), Fleet()).fits());
  r.profile = "python";
  EXPECT_EQ(f->Filter(r, Node(), Fleet()).reason, "no profile python");
}

TEST(NodeSelectorFilterTest, EveryLabelMustMatch) {
  auto f = NewNodeSelectorFilter();
  NodeInfo n = Node();
  n.labels = {{"zone", "a"}, {"gpu", "no"}};
  SandboxRequest r = Request();
  EXPECT_TRUE(f->Filter(r, n, Fleet()).fits());
  r.node_selector = {{"zone", "a"}};
  EXPECT_TRUE(f->Filter(r, n, Fleet()).fits());
  r.node_selector = {{"zone", "a"}, {"gpu", "yes"}};
  EXPECT_EQ(f->Filter(r, n, Fleet()).reason, "labels do not match");
  r.node_selector = {{"rack", "1"}};
  EXPECT_FALSE(f->Filter(r, n, Fleet()).fits());
}

TEST(TaintTolerationFilterTest, TaintsNeedATolerationByKeyOrKeyAndValue) {
  auto f = NewTaintTolerationFilter();
  NodeInfo n = Node();
  n.taints = {{"dedicated", "ci"}};
  SandboxRequest r = Request();
  EXPECT_EQ(f->Filter(r, n, Fleet()).reason, "untolerated taint dedicated");
  r.tolerations = {{"dedicated", "batch"}};
  EXPECT_FALSE(f->Filter(r, n, Fleet()).fits());
  r.tolerations = {{"dedicated", "ci"}};
  EXPECT_TRUE(f->Filter(r, n, Fleet()).fits());
  r.tolerations = {{"dedicated", ""}};  // Any value.
  EXPECT_TRUE(f->Filter(r, n, Fleet()).fits());
}

TEST(WarmPoolScoreTest, AWarmSandboxOfTheProfileScoresFull) {
  auto s = NewWarmPoolScore();
  NodeInfo n = Node();
  EXPECT_EQ(s->Score(Request(), n, Fleet()), 0);
  n.warm = {{"python", 3}, {"default", 0}};
  EXPECT_EQ(s->Score(Request(), n, Fleet()), 0);
  n.warm["default"] = 1;
  EXPECT_EQ(s->Score(Request(), n, Fleet()), 100);
}

TEST(LeastAllocatedScoreTest, EmptierNodesScoreHigher) {
  auto s = NewLeastAllocatedScore();
  Snapshot fleet;
  fleet.overcommit = {1, 1, 1};
  NodeInfo n = Node();
  n.allocatable = {4, 8 * kGiB, 0};
  SandboxRequest r = Request();
  r.resources = {1, 2 * kGiB, 0};
  EXPECT_EQ(s->Score(r, n, fleet), 75);  // 3/4 of each left.
  n.allocated = {2, 4 * kGiB, 0};
  EXPECT_EQ(s->Score(r, n, fleet), 25);
  n.allocated = {4, 8 * kGiB, 0};
  EXPECT_EQ(s->Score(r, n, fleet), 0);  // Never below 0.
  n.allocatable = {};
  EXPECT_EQ(s->Score(r, n, fleet), 0);  // No capacity reported.
}

TEST(TenantSpreadScoreTest, FewerOfTheTenantsSandboxesScoreHigher) {
  auto s = NewTenantSpreadScore();
  NodeInfo n = Node();
  EXPECT_EQ(s->Score(Request(), n, Fleet()), 100);
  n.tenant_sandboxes = {{"t1", 1}, {"t2", 9}};
  EXPECT_EQ(s->Score(Request(), n, Fleet()), 50);
  n.tenant_sandboxes["t1"] = 3;
  EXPECT_EQ(s->Score(Request(), n, Fleet()), 25);
}

TEST(NormalizeArchTest, DebianAndKernelNamesAreOne) {
  EXPECT_EQ(NormalizeArch("amd64"), "x86_64");
  EXPECT_EQ(NormalizeArch("arm64"), "aarch64");
  EXPECT_EQ(NormalizeArch("aarch64"), "aarch64");
}

}  // namespace
}  // namespace moat::controller::scheduler
