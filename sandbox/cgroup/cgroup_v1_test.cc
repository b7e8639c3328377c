// cgroup v1: against a fake tree (what is written, what is read back) and, as root, against the
// real v1 hierarchies of this machine for what a fake cannot show (kernel-enforced ordering,
// killing without a freezer).
#include "sandbox/cgroup/cgroup_v1.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sandbox/cgroup/cgroup_spares.h"
#include "sandbox/testing/fake_cgroup_tree.h"
#include "sandbox/testing/test_child.h"

namespace moat::sandbox {
namespace {

using ::testing::ElementsAre;
using testing::FakeCgroupTree;
using ::testing::HasSubstr;
using testing::TestChild;

constexpr CgroupLimits kLimits{.memory_bytes = 256 << 20, .pids = 64, .cpus = 1.5};
constexpr char kName[] = "42-sandbox";

class CgroupV1FakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = tree_.AddV1Mount("cpu,cpuacct", "rw,cpu,cpuacct");
    memory_ = tree_.AddV1Mount("memory", "rw,memory");
    pids_ = tree_.AddV1Mount("pids", "rw,pids");
    freezer_ = tree_.AddV1Mount("freezer", "rw,freezer");
  }
  // The `moat` parent and the leaf, as a kernel would have created them.
  std::string Populate(const std::string& mount, const std::vector<std::string>& controllers,
                       bool memsw = true) {
    tree_.PopulateV1(mount + "/moat", controllers, memsw);
    tree_.PopulateV1(mount + "/moat/" + kName, controllers, memsw);
    return mount + "/moat/" + kName;
  }
  void PopulateAll(bool memsw = true) {
    cpu_leaf_ = Populate(cpu_, {"cpu", "cpuacct"});
    memory_leaf_ = Populate(memory_, {"memory"}, memsw);
    pids_leaf_ = Populate(pids_, {"pids"});
    freezer_leaf_ = Populate(freezer_, {"freezer"});
  }
  std::map<std::string, std::string> Controllers() const {
    return {{"cpu", cpu_},
            {"cpuacct", cpu_},
            {"memory", memory_},
            {"pids", pids_},
            {"freezer", freezer_}};
  }
  // The sandbox's cgroup in every hierarchy, with kLimits.
  absl::StatusOr<std::unique_ptr<CgroupV1>> Create() {
    return CgroupV1::Create(Controllers(), kName, kLimits);
  }
  static std::string Read(const std::string& path) { return FakeCgroupTree::Read(path); }

  FakeCgroupTree tree_;
  std::string cpu_, memory_, pids_, freezer_;
  std::string cpu_leaf_, memory_leaf_, pids_leaf_, freezer_leaf_;
};

TEST_F(CgroupV1FakeTest, WritesLimitsOnceInCoMountedHierarchies) {
  PopulateAll();
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  EXPECT_EQ(Read(cpu_leaf_ + "/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(Read(cpu_leaf_ + "/cpu.cfs_quota_us"), "150000");
  EXPECT_EQ(Read(memory_leaf_ + "/memory.limit_in_bytes"), "268435456");
  EXPECT_EQ(Read(memory_leaf_ + "/memory.memsw.limit_in_bytes"), "268435456");
  EXPECT_EQ(Read(pids_leaf_ + "/pids.max"), "64");
  // cpu and cpuacct share "cpu,cpuacct": one directory, not two.
  EXPECT_THAT((*cgroup)->paths(), ElementsAre(cpu_leaf_, freezer_leaf_, memory_leaf_, pids_leaf_));
  EXPECT_EQ((*cgroup)->clone_into_fd(), -1);
}

TEST_F(CgroupV1FakeTest, NoMemswFileNoMemswLimit) {
  PopulateAll(/*memsw=*/false);
  ASSERT_TRUE(Create().ok());
  EXPECT_EQ(Read(memory_leaf_ + "/memory.limit_in_bytes"), "268435456");
  EXPECT_FALSE(std::filesystem::exists(memory_leaf_ + "/memory.memsw.limit_in_bytes"));
}

TEST_F(CgroupV1FakeTest, ReusedLeafHasItsPeakReset) {
  PopulateAll();
  FakeCgroupTree::Write(memory_leaf_ + "/memory.max_usage_in_bytes", "999999\n");
  ASSERT_TRUE(Create().ok());
  EXPECT_EQ(Read(memory_leaf_ + "/memory.max_usage_in_bytes"), "0");
}

TEST_F(CgroupV1FakeTest, AddProcessWritesEveryHierarchy) {
  PopulateAll();
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  // A pid above any pid_max: nothing real can be hit by the destructor's KillAll.
  ASSERT_TRUE((*cgroup)->AddProcess(999999999).ok());
  for (const std::string& dir : (*cgroup)->paths()) {
    EXPECT_EQ(Read(dir + "/cgroup.procs"), "999999999") << dir;
    FakeCgroupTree::Write(dir + "/cgroup.procs", "");
  }
}

TEST_F(CgroupV1FakeTest, ReadsUsageBack) {
  PopulateAll();
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  FakeCgroupTree::Write(cpu_leaf_ + "/cpuacct.usage", "123456789\n");
  FakeCgroupTree::Write(memory_leaf_ + "/memory.max_usage_in_bytes", "5242880\n");
  FakeCgroupTree::Write(memory_leaf_ + "/memory.oom_control",
                        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  EXPECT_EQ(*(*cgroup)->ReadCpuNs(), 123456789u);
  absl::StatusOr<CgroupUsage> usage = (*cgroup)->ReadUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->cpu_ns, 123456789u);
  EXPECT_EQ(usage->memory_peak_bytes, 5242880u);
  EXPECT_EQ(usage->oom_kills, 3u);
}

TEST_F(CgroupV1FakeTest, OldKernelWithoutOomKillLineReportsNone) {
  PopulateAll();
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  FakeCgroupTree::Write(memory_leaf_ + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n");
  absl::StatusOr<CgroupUsage> usage = (*cgroup)->ReadUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->oom_kills, 0u);
}

TEST_F(CgroupV1FakeTest, WithoutCpuacctReadCpuNsSaysSo) {
  PopulateAll();
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup =
      CgroupV1::Create({{"memory", memory_}}, kName, kLimits);
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  EXPECT_EQ((*cgroup)->ReadCpuNs().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*cgroup)->ReadUsage()->cpu_ns, 0u);
}

TEST_F(CgroupV1FakeTest, CopiesCpusetWhenCoMountedWithCpuset) {
  const std::string mount = tree_.AddV1Mount("cpu,cpuset", "rw,cpu,cpuset");
  tree_.PopulateV1(mount, {"cpuset"});
  FakeCgroupTree::Write(mount + "/cpuset.cpus", "0-1\n");
  FakeCgroupTree::Write(mount + "/cpuset.mems", "0\n");
  const std::string leaf = Populate(mount, {"cpu", "cpuset"});
  ASSERT_TRUE(CgroupV1::Create({{"cpu", mount}}, kName, kLimits).ok());
  EXPECT_EQ(Read(mount + "/moat/cpuset.cpus"), "0-1");
  EXPECT_EQ(Read(mount + "/moat/cpuset.mems"), "0");
  EXPECT_EQ(Read(leaf + "/cpuset.cpus"), "0-1");
  EXPECT_EQ(Read(leaf + "/cpuset.mems"), "0");
}

TEST_F(CgroupV1FakeTest, RefusesANameInUseBeforeCreatingAnything) {
  memory_leaf_ = Populate(memory_, {"memory"});
  FakeCgroupTree::Write(memory_leaf_ + "/cgroup.procs", absl::StrCat(getpid(), "\n"));
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = Create();
  EXPECT_EQ(cgroup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(cgroup.status().message(), HasSubstr("\"" + memory_leaf_ + "\""));
  EXPECT_FALSE(std::filesystem::exists(pids_ + "/moat"));
  EXPECT_FALSE(std::filesystem::exists(cpu_ + "/moat"));
}

// A spare as an earlier run left it: counters that were never reset, page cache still charged.
TEST_F(CgroupV1FakeTest, ClaimsASpareAndCountsOnlyItsOwnRun) {
  for (const auto& [mount, controllers] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{
           {cpu_, {"cpu", "cpuacct"}}, {memory_, {"memory"}}, {pids_, {"pids"}}}) {
    tree_.PopulateV1(mount + "/moat", controllers);
    tree_.PopulateV1(mount + "/moat/spare-0", controllers);
  }
  const std::string spare_memory = memory_ + "/moat/spare-0";
  FakeCgroupTree::Write(cpu_ + "/moat/spare-0/cpuacct.usage", "5000000000\n");
  FakeCgroupTree::Write(cpu_ + "/moat/spare-0/cpu.cfs_quota_us", "20000\n");
  FakeCgroupTree::Write(spare_memory + "/memory.max_usage_in_bytes", "300000000\n");
  FakeCgroupTree::Write(spare_memory + "/memory.usage_in_bytes", "4096000\n");
  FakeCgroupTree::Write(spare_memory + "/memory.oom_control",
                        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  FakeCgroupTree::Write(pids_ + "/moat/spare-0/pids.events", "max 5\n");

  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = CgroupV1::Create(
      {{"cpu", cpu_}, {"cpuacct", cpu_}, {"memory", memory_}, {"pids", pids_}}, kName, kLimits);
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  memory_leaf_ = memory_ + "/moat/" + kName;
  EXPECT_FALSE(std::filesystem::exists(spare_memory)) << "the spare was not claimed";
  EXPECT_THAT((*cgroup)->paths(),
              ElementsAre(cpu_ + "/moat/" + kName, memory_leaf_, pids_ + "/moat/" + kName));
  // Limits are this run's; the resettable counters were reset.
  EXPECT_EQ(Read(cpu_ + "/moat/" + kName + "/cpu.cfs_quota_us"), "150000");
  EXPECT_EQ(Read(memory_leaf_ + "/memory.limit_in_bytes"), "268435456");
  EXPECT_EQ(Read(pids_ + "/moat/" + kName + "/pids.max"), "64");
  EXPECT_EQ(Read(cpu_ + "/moat/" + kName + "/cpuacct.usage"), "0");
  EXPECT_EQ(Read(memory_leaf_ + "/memory.max_usage_in_bytes"), "0");
  // (A kernel sets the high-water mark to the current usage on that write.)
  FakeCgroupTree::Write(memory_leaf_ + "/memory.max_usage_in_bytes", "4096000\n");

  // A run with no OOM kill and no refused fork, which peaked 1 MiB above what was left over.
  absl::StatusOr<CgroupUsage> usage = (*cgroup)->ReadUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->oom_kills, 0u);
  EXPECT_EQ(usage->pids_limit_hits, 0u);
  EXPECT_EQ(usage->memory_peak_bytes, 0u);
  FakeCgroupTree::Write(memory_leaf_ + "/memory.max_usage_in_bytes", "5144576\n");
  FakeCgroupTree::Write(memory_leaf_ + "/memory.oom_control",
                        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  FakeCgroupTree::Write(pids_ + "/moat/" + kName + "/pids.events", "max 7\n");
  usage = (*cgroup)->ReadUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->memory_peak_bytes, 1u << 20);
  EXPECT_EQ(usage->oom_kills, 1u);
  EXPECT_EQ(usage->pids_limit_hits, 2u);
}

TEST_F(CgroupV1FakeTest, RecycleKeepsEmptyDirectoriesAsSpares) {
  PopulateAll();
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  FakeCgroupTree::Write(memory_leaf_ + "/memory.usage_in_bytes", "3000000\n");  // some page cache
  ASSERT_TRUE((*cgroup)->Recycle().ok());
  for (const std::string& mount : {cpu_, memory_, pids_, freezer_}) {
    EXPECT_FALSE(std::filesystem::exists(mount + "/moat/" + kName)) << mount;
    EXPECT_TRUE(std::filesystem::exists(mount + "/moat/spare-0/cgroup.procs")) << mount;
  }
  EXPECT_TRUE((*cgroup)->Recycle().ok());  // idempotent
  EXPECT_EQ((*cgroup)->ReadCpuNs().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CgroupV1FakeTest, RecycleRemovesWhatShouldNotBeKept) {
  PopulateAll();
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  // Too much memory still charged; a sub-cgroup under pids.
  FakeCgroupTree::Write(memory_leaf_ + "/memory.usage_in_bytes",
                        absl::StrCat(CgroupV1::kMaxSpareCharge + 1, "\n"));
  tree_.PopulateV1(pids_leaf_ + "/child", {"pids"});
  // The fake tree's directories hold plain files, so removing them fails here; what matters is
  // which ones were kept.
  (*cgroup)->Recycle().IgnoreError();
  EXPECT_TRUE(std::filesystem::exists(cpu_ + "/moat/spare-0"));
  EXPECT_FALSE(std::filesystem::exists(memory_ + "/moat/spare-0"));
  EXPECT_FALSE(std::filesystem::exists(pids_ + "/moat/spare-0"));
}

// ---- the real v1 hierarchies --------------------------------------------------------------------

class CgroupV1RealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout();
    ASSERT_TRUE(layout.ok()) << layout.status();
    for (const char* c : {"memory", "pids"}) {
      if (!layout->v1_mounts.contains(c)) GTEST_SKIP() << "no v1 " << c << " hierarchy here";
    }
    layout_ = *layout;
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  void TearDown() override { testing::ReapAll(); }
  std::string Name(const std::string& what) { return absl::StrCat(getpid(), "-v1test-", what); }

  CgroupLayout layout_;
};

TEST_F(CgroupV1RealTest, RaisesMemswFirstWhenAReusedLeafHasALowerOne) {
  // A leftover leaf with memory and memory+swap at 16 MiB: the kernel refuses a memory limit
  // above memsw (EINVAL), so the code must raise memsw first.
  const std::string leaf = layout_.v1_mounts.at("memory") + "/moat/" + Name("memsw");
  if (!std::filesystem::exists(layout_.v1_mounts.at("memory") + "/memory.memsw.limit_in_bytes")) {
    GTEST_SKIP() << "no swap accounting (memory.memsw.*) on this kernel";
  }
  ::mkdir((layout_.v1_mounts.at("memory") + "/moat").c_str(), 0755);
  ASSERT_EQ(::mkdir(leaf.c_str(), 0755), 0);
  FakeCgroupTree::Write(leaf + "/memory.limit_in_bytes", "16777216");
  FakeCgroupTree::Write(leaf + "/memory.memsw.limit_in_bytes", "16777216");
  ASSERT_EQ(FakeCgroupTree::Read(leaf + "/memory.memsw.limit_in_bytes"), "16777216\n");

  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup =
      CgroupV1::Create({{"memory", layout_.v1_mounts.at("memory")}}, Name("memsw"),
                       {.memory_bytes = 64 << 20, .pids = 8, .cpus = 1});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  EXPECT_EQ(FakeCgroupTree::Read(leaf + "/memory.limit_in_bytes"), "67108864\n");
  EXPECT_EQ(FakeCgroupTree::Read(leaf + "/memory.memsw.limit_in_bytes"), "67108864\n");
  ASSERT_TRUE((*cgroup)->Destroy().ok());
  EXPECT_FALSE(std::filesystem::exists(leaf));
}

TEST_F(CgroupV1RealTest, KillAllWithoutFreezerStillEmptiesAForkingTree) {
  absl::StatusOr<std::unique_ptr<CgroupV1>> cgroup = CgroupV1::Create(
      {{"memory", layout_.v1_mounts.at("memory")}, {"pids", layout_.v1_mounts.at("pids")}},
      Name("nofreezer"), {.memory_bytes = 256 << 20, .pids = 64, .cpus = 1});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  TestChild child([] {
    // Keeps forking short-lived children while it lives, bounded by pids.max.
    while (true) {
      pid_t pid = ::fork();
      if (pid == 0) {
        absl::SleepFor(absl::Milliseconds(5));
        ::_exit(0);
      }
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
    }
    return 0;
  });
  ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  child.Release();
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE((*cgroup)->KillAll().ok());
  for (const std::string& dir : (*cgroup)->paths()) {
    EXPECT_EQ(FakeCgroupTree::Read(dir + "/cgroup.procs"), "") << dir;
  }
  int status = child.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_TRUE((*cgroup)->Destroy().ok());
}

}  // namespace
}  // namespace moat::sandbox
