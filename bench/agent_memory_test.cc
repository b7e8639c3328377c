#include "bench/agent_memory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::bench {
namespace {

TEST(KbFieldBytes, ReadsTheNamedLineInBytes) {
  constexpr char kStatus[] = "Name:\tsleep\nVmPTE:\t      48 kB\nVmSwap:\t       0 kB\n";
  EXPECT_EQ(*KbFieldBytes(kStatus, "VmPTE"), 48u * 1024);
  EXPECT_EQ(*KbFieldBytes(kStatus, "VmSwap"), 0u);
}

TEST(KbFieldBytes, DoesNotTakeALongerNameWithTheSamePrefix) {
  constexpr char kRollup[] = "Pss_Anon:   10 kB\nPss:   120 kB\n";
  EXPECT_EQ(*KbFieldBytes(kRollup, "Pss"), 120u * 1024);
}

TEST(KbFieldBytes, MissingOrMalformedIsAnError) {
  EXPECT_FALSE(KbFieldBytes("VmRSS:\t 4 kB\n", "VmPTE").ok());
  EXPECT_FALSE(KbFieldBytes("VmPTE:\t many kB\n", "VmPTE").ok());
  EXPECT_FALSE(KbFieldBytes("VmPTE:\t 4 pages\n", "VmPTE").ok());
}

TEST(FindMemoryCgroupMount, PrefersTheV1MemoryHierarchyOnAHybridHost) {
  constexpr char kMounts[] =
      "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
      "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
      "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n";
  std::optional<MemoryCgroupMount> m = FindMemoryCgroupMount(kMounts);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->path, "/sys/fs/cgroup/memory");
  EXPECT_FALSE(m->v2);
  EXPECT_EQ(m->ChargeFile(), "memory.usage_in_bytes");
}

TEST(FindMemoryCgroupMount, TakesCgroup2WhenNoV1HierarchyHasMemory) {
  std::optional<MemoryCgroupMount> m = FindMemoryCgroupMount(
      "proc /proc proc rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->path, "/sys/fs/cgroup");
  EXPECT_TRUE(m->v2);
  EXPECT_EQ(m->ChargeFile(), "memory.current");
  EXPECT_FALSE(FindMemoryCgroupMount("proc /proc proc rw 0 0\n").has_value());
}

TEST(CgroupPathOf, FindsTheControllersLineOrTheUnifiedOne) {
  constexpr char kCgroup[] =
      "12:pids:/a\n4:cpu,cpuacct:/b\n3:memory:/moat/1-sb-x\n0::/weird:path\n";
  EXPECT_EQ(CgroupPathOf(kCgroup, "memory"), "/moat/1-sb-x");
  EXPECT_EQ(CgroupPathOf(kCgroup, "cpuacct"), "/b");
  EXPECT_EQ(CgroupPathOf(kCgroup, ""), "/weird:path");
  EXPECT_FALSE(CgroupPathOf(kCgroup, "blkio").has_value());
}

TEST(ParseProcStat, HandlesSpacesAndParenthesesInTheName) {
  absl::StatusOr<ProcStat> s = ParseProcStat("4242 (moat) probe)) S 17 4242 4242 0 -1\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->comm, "moat) probe)");
  EXPECT_EQ(s->ppid, 17);
  EXPECT_FALSE(ParseProcStat("4242 moat-probe S 17").ok());
  EXPECT_FALSE(ParseProcStat("4242 (x) S").ok());
}

TEST(KeyValue, ReadsTheExactKey) {
  constexpr char kStat[] = "cache 4096\nrss 8192\ntotal_rss 16384\nshmem x\n";
  EXPECT_EQ(KeyValue(kStat, "rss"), 8192u);
  EXPECT_EQ(KeyValue(kStat, "total_rss"), 16384u);
  EXPECT_FALSE(KeyValue(kStat, "shmem").has_value());
  EXPECT_FALSE(KeyValue(kStat, "swap").has_value());
}

TEST(MetricValue, ReadsTheExactSeries) {
  constexpr char kText[] =
      "# HELP moat_pool_depth Warm sandboxes ready\n"
      "moat_pool_depth{profile=\"python\"} 3\n"
      "moat_pool_depth{profile=\"default\"} 20\n"
      "moat_pool_depth_total 9 1700000000\n";
  EXPECT_EQ(MetricValue(kText, "moat_pool_depth{profile=\"default\"}"), 20);
  EXPECT_EQ(MetricValue(kText, "moat_pool_depth{profile=\"python\"}"), 3);
  EXPECT_EQ(MetricValue(kText, "moat_pool_depth_total"), 9);
  EXPECT_FALSE(MetricValue(kText, "moat_pool_depth").has_value());
}

}  // namespace
}  // namespace moat::bench
