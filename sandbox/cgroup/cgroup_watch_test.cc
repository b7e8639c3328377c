#include "sandbox/cgroup/cgroup_watch.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/testing/fake_cgroup_tree.h"
#include "sandbox/testing/status_matchers.h"

namespace moat::sandbox {
namespace {

using ::moat::matchers::IsOk;
using ::testing::Optional;

// v2: every figure from the one directory, CPU from cpu.stat's microseconds.
TEST(CgroupWatchTest, ReadsAV2Cgroup) {
  testing::FakeCgroupTree tree;
  const std::string dir = tree.Path("v2/moat/sb");
  tree.PopulateV2(dir, {});
  tree.Write(dir + "/cgroup.procs", "11\n12\n");
  tree.Write(dir + "/pids.current", "5\n");
  tree.Write(dir + "/memory.current", "4096\n");
  tree.Write(dir + "/cpu.stat", "usage_usec 250\nuser_usec 200\nsystem_usec 50\n");
  tree.Write(dir + "/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n");
  absl::StatusOr<CgroupSample> now = ReadCgroupNow({dir});
  ASSERT_THAT(now.status(), IsOk());
  EXPECT_EQ(now->processes, 2);
  EXPECT_THAT(now->tasks, Optional(5u));
  EXPECT_THAT(now->memory_bytes, Optional(4096u));
  EXPECT_THAT(now->cpu_ns, Optional(250'000u));
  EXPECT_THAT(now->oom_kills, Optional(2u));
}

// v1: one directory per hierarchy, each figure from the one that has its file; v1's cpu.stat
// (throttling counts) is not CPU time, cpuacct.usage (nanoseconds) is.
TEST(CgroupWatchTest, ReadsV1HierarchiesEachForItsFigure) {
  testing::FakeCgroupTree tree;
  const std::string cpu = tree.Path("cpu,cpuacct/moat/sb");
  const std::string memory = tree.Path("memory/moat/sb");
  const std::string pids = tree.Path("pids/moat/sb");
  tree.PopulateV1(cpu, {"cpu", "cpuacct"});
  tree.PopulateV1(memory, {"memory"});
  tree.PopulateV1(pids, {"pids"});
  tree.Write(cpu + "/cgroup.procs", "7\n");
  tree.Write(cpu + "/cpu.stat", "nr_periods 9\nnr_throttled 9\nthrottled_time 9\n");
  tree.Write(cpu + "/cpuacct.usage", "123456\n");
  tree.Write(memory + "/memory.usage_in_bytes", "8192\n");
  tree.Write(memory + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  tree.Write(pids + "/pids.current", "3\n");
  absl::StatusOr<CgroupSample> now = ReadCgroupNow({cpu, memory, pids});
  ASSERT_THAT(now.status(), IsOk());
  EXPECT_EQ(now->processes, 1);
  EXPECT_THAT(now->tasks, Optional(3u));
  EXPECT_THAT(now->memory_bytes, Optional(8192u));
  EXPECT_THAT(now->cpu_ns, Optional(123456u));
  EXPECT_THAT(now->oom_kills, Optional(1u));
}

TEST(CgroupWatchTest, AMissingDirectoryIsAnError) {
  EXPECT_FALSE(ReadCgroupNow({"/nonexistent/moat/sb"}).ok());
  absl::StatusOr<CgroupSample> none = ReadCgroupNow({});
  ASSERT_THAT(none.status(), IsOk());
  EXPECT_EQ(none->processes, 0);
  EXPECT_FALSE(none->memory_bytes.has_value());
}

}  // namespace
}  // namespace moat::sandbox
