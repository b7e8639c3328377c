// The public cgroup API end to end on this machine's real cgroups (needs root): limits land in
// the kernel's files and are enforced, usage is read back, KillAll/Destroy leave nothing, stale
// cgroups are cleaned up. Also measures Create() and AddProcess().
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/cgroup/cgroup_spares.h"
#include "sandbox/cgroup/run_cgroup.h"
#include "sandbox/testing/fake_cgroup_tree.h"
#include "sandbox/testing/test_child.h"

namespace moat::sandbox {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Not;
using testing::TestChild;
using ::testing::UnorderedElementsAreArray;

std::string Read(const std::string& path) { return testing::FakeCgroupTree::Read(path); }
bool KilledBySigkill(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

class CgroupRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout();
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    absl::StatusOr<CgroupPlan> plan = PlanCgroup(layout_);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *plan;
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned grandchildren come back to us to be reaped
  }
  void TearDown() override { testing::ReapAll(); }

  std::string Name(const std::string& what) const {
    return absl::StrCat(getpid(), "-roottest-", what);
  }
  absl::StatusOr<std::unique_ptr<Cgroup>> Create(const std::string& what,
                                                 const CgroupLimits& limits) {
    return Cgroup::Create(layout_, Name(what), limits);
  }
  // Where `controller`'s files for cgroup `what` are, per the plan.
  std::string Dir(const std::string& controller, const std::string& what) const {
    auto it = plan_.v1.find(controller);
    const std::string& mount = it != plan_.v1.end() ? it->second : plan_.v2_mount;
    return absl::StrCat(mount, "/moat/", Name(what));
  }
  bool OnV1(const std::string& controller) const { return plan_.v1.contains(controller); }

  CgroupLayout layout_;
  CgroupPlan plan_;
};

TEST_F(CgroupRootTest, WritesLimitsIntoTheKernelAndDestroyRemovesEveryDirectory) {
  absl::StatusOr<std::unique_ptr<Cgroup>> cgroup =
      Create("limits", {.memory_bytes = 64 << 20, .pids = 16, .cpus = 0.5});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  std::cout << "layout: " << layout_.Describe() << "; cgroup dirs:";
  for (const std::string& dir : (*cgroup)->paths()) std::cout << " " << dir;
  std::cout << "\n";

  std::set<std::string> expected;
  for (const auto& [controller, mount] : plan_.v1) expected.insert(Dir(controller, "limits"));
  if (plan_.uses_v2()) expected.insert(plan_.v2_mount + "/moat/" + Name("limits"));
  EXPECT_THAT((*cgroup)->paths(), UnorderedElementsAreArray(expected));
  for (const std::string& dir : expected) EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;

  if (OnV1("cpu")) {
    EXPECT_EQ(Read(Dir("cpu", "limits") + "/cpu.cfs_period_us"), "100000\n");
    EXPECT_EQ(Read(Dir("cpu", "limits") + "/cpu.cfs_quota_us"), "50000\n");
  } else {
    EXPECT_EQ(Read(Dir("cpu", "limits") + "/cpu.max"), "50000 100000\n");
  }
  if (OnV1("memory")) {
    EXPECT_EQ(Read(Dir("memory", "limits") + "/memory.limit_in_bytes"), "67108864\n");
    const std::string memsw = Dir("memory", "limits") + "/memory.memsw.limit_in_bytes";
    if (std::filesystem::exists(memsw)) {
      EXPECT_EQ(Read(memsw), "67108864\n");
    }
  } else {
    EXPECT_EQ(Read(Dir("memory", "limits") + "/memory.max"), "67108864\n");
    const std::string swap = Dir("memory", "limits") + "/memory.swap.max";
    if (std::filesystem::exists(swap)) {
      EXPECT_EQ(Read(swap), "0\n");
    }
  }
  EXPECT_EQ(Read(Dir("pids", "limits") + "/pids.max"), "16\n");

  ASSERT_TRUE((*cgroup)->Destroy().ok());
  for (const std::string& dir : expected) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  EXPECT_TRUE((*cgroup)->Destroy().ok());  // idempotent
  EXPECT_EQ((*cgroup)->ReadCpuNs().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CgroupRootTest, MeasuresCpuTimeAndTheQuotaThrottles) {
  absl::StatusOr<std::unique_ptr<Cgroup>> cgroup =
      Create("cpu", {.memory_bytes = 256 << 20, .pids = 16, .cpus = 0.5});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  TestChild child([] {
    testing::BurnCpu(150'000'000);  // 150 ms of CPU
    return 0;
  });
  ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  EXPECT_EQ(*(*cgroup)->ReadCpuNs() / 1'000'000, 0u);  // nothing run yet
  const absl::Time start = absl::Now();
  child.Release();
  ASSERT_TRUE(WIFEXITED(child.Wait()));
  const absl::Duration wall = absl::Now() - start;
  absl::StatusOr<uint64_t> cpu_ns = (*cgroup)->ReadCpuNs();
  ASSERT_TRUE(cpu_ns.ok()) << cpu_ns.status();
  std::cout << "150 ms of CPU at 0.5 cores: cgroup counted " << *cpu_ns / 1e6 << " ms in "
            << absl::FormatDuration(wall) << " of wall time\n";
  EXPECT_GE(*cpu_ns, 140'000'000u);  // all but the instants before the move
  EXPECT_LT(*cpu_ns, 400'000'000u);
  // 50 ms per 100 ms period: 150 ms of CPU needs three periods' quotas, so at least two whole
  // periods pass (unthrottled it would take 150 ms). The kernel hands quota out in per-CPU
  // slices, so the last period may start a few ms early: 199.4 ms was seen once.
  EXPECT_GE(wall, absl::Milliseconds(185));
  // The same counter: read again, it may have grown by the exited child's last accounting
  // (seen once: 56 us later), never shrunk.
  const uint64_t again = (*cgroup)->ReadUsage()->cpu_ns;
  EXPECT_GE(again, *cpu_ns);
  EXPECT_LT(again, *cpu_ns + 1'000'000u);
}

TEST_F(CgroupRootTest, MemoryLimitCausesAnOomKillThatReadUsageReports) {
  absl::StatusOr<std::unique_ptr<Cgroup>> cgroup =
      Create("oom", {.memory_bytes = 32 << 20, .pids = 16, .cpus = 1});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  TestChild child([] {
    constexpr size_t kSize = 256 << 20;
    // volatile: the compiler must not drop stores to memory that is never read.
    volatile char* p = static_cast<char*>(std::malloc(kSize));
    for (size_t i = 0; p != nullptr && i < kSize; i += 4096) p[i] = 1;  // touch every page
    return p == nullptr ? 2 : 0;
  });
  ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  child.Release();
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  absl::StatusOr<CgroupUsage> usage = (*cgroup)->ReadUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  std::cout << "OOM: peak " << usage->memory_peak_bytes << " bytes, oom_kills " << usage->oom_kills
            << "\n";
  EXPECT_GE(usage->oom_kills, 1u);
  EXPECT_GE(usage->memory_peak_bytes, 16u << 20);
  EXPECT_LE(usage->memory_peak_bytes, (32u << 20) + (1u << 20));
}

TEST_F(CgroupRootTest, PidsMaxStopsAForkLoop) {
  absl::StatusOr<std::unique_ptr<Cgroup>> cgroup =
      Create("pids", {.memory_bytes = 256 << 20, .pids = 8, .cpus = 1});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  TestChild child([] {
    // Exit code: forks that succeeded before one failed with EAGAIN (or 200: none failed).
    for (int forks = 0; forks < 200; ++forks) {
      pid_t pid = ::fork();
      if (pid == 0) {
        ::pause();
        ::_exit(0);
      }
      if (pid < 0) return errno == EAGAIN ? forks : 201;
    }
    return 200;
  });
  ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  child.Release();
  // The loop ends at the limit; its children stay until KillAll.
  int status = child.Wait();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);  // 8 tasks: the child and 7 forks
  absl::StatusOr<CgroupUsage> usage = (*cgroup)->ReadUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_GE(usage->pids_limit_hits, 1u);  // the refused fork is counted
  ASSERT_TRUE((*cgroup)->KillAll().ok());
  for (const std::string& dir : (*cgroup)->paths()) EXPECT_EQ(Read(dir + "/cgroup.procs"), "");
}

TEST_F(CgroupRootTest, KillAllEmptiesAProcessTree) {
  absl::StatusOr<std::unique_ptr<Cgroup>> cgroup =
      Create("killall", {.memory_bytes = 256 << 20, .pids = 64, .cpus = 1});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  TestChild child([] {
    for (int i = 0; i < 10; ++i) {
      if (::fork() == 0) {
        ::setsid();  // a new session does not escape a cgroup
        if (::fork() == 0) ::pause();
        ::pause();
      }
    }
    ::pause();
    return 0;
  });
  ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  child.Release();
  absl::SleepFor(absl::Milliseconds(50));
  const std::string procs = (*cgroup)->paths().front() + "/cgroup.procs";
  EXPECT_NE(Read(procs), "");
  ASSERT_TRUE((*cgroup)->KillAll().ok());
  for (const std::string& dir : (*cgroup)->paths()) EXPECT_EQ(Read(dir + "/cgroup.procs"), "");
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  ASSERT_TRUE((*cgroup)->Destroy().ok());
}

TEST_F(CgroupRootTest, DestroyKillsFirstAndTheDestructorCleansUp) {
  std::vector<std::string> dirs;
  TestChild child([] {
    ::pause();
    return 0;
  });
  {
    absl::StatusOr<std::unique_ptr<Cgroup>> cgroup =
        Create("dtor", {.memory_bytes = 64 << 20, .pids = 8, .cpus = 1});
    ASSERT_TRUE(cgroup.ok()) << cgroup.status();
    dirs = (*cgroup)->paths();
    ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
    child.Release();
  }  // no Destroy(): the destructor must do it
  for (const std::string& dir : dirs) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
}

TEST_F(CgroupRootTest, RefusesANameInUse) {
  absl::StatusOr<std::unique_ptr<Cgroup>> first =
      Create("dup", {.memory_bytes = 64 << 20, .pids = 8, .cpus = 1});
  ASSERT_TRUE(first.ok()) << first.status();
  TestChild child([] {
    ::pause();
    return 0;
  });
  ASSERT_TRUE((*first)->AddProcess(child.pid()).ok());
  absl::StatusOr<std::unique_ptr<Cgroup>> second =
      Create("dup", {.memory_bytes = 64 << 20, .pids = 8, .cpus = 1});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(second.status().message(), HasSubstr(Name("dup")));
  // The refused Create must not have touched the first one's processes.
  EXPECT_EQ(::kill(child.pid(), 0), 0);
  EXPECT_THAT(Read((*first)->paths().front() + "/cgroup.procs"),
              HasSubstr(absl::StrCat(child.pid())));
}

TEST_F(CgroupRootTest, CleanupStaleCgroupsRemovesOnlyThoseOfDeadOwners) {
  // A pid that existed and is gone: a crashed supervisor.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale_name = absl::StrCat(dead, "-crashed");

  // What the crashed run left: its directories, with a process still inside.
  TestChild orphan([] {
    ::pause();
    return 0;
  });
  std::set<std::string> mounts;
  for (const auto& [controller, mount] : plan_.v1) mounts.insert(mount);
  if (plan_.uses_v2()) mounts.insert(plan_.v2_mount);
  std::vector<std::string> stale_dirs;
  for (const std::string& mount : mounts) {
    ::mkdir((mount + "/moat").c_str(), 0755);
    const std::string dir = absl::StrCat(mount, "/moat/", stale_name);
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir << ": " << strerror(errno);
    testing::FakeCgroupTree::Write(dir + "/cgroup.procs", absl::StrCat(orphan.pid()));
    stale_dirs.push_back(dir);
  }
  orphan.Release();

  absl::StatusOr<std::unique_ptr<Cgroup>> live =
      Create("live", {.memory_bytes = 64 << 20, .pids = 8, .cpus = 1});
  ASSERT_TRUE(live.ok()) << live.status();

  absl::StatusOr<std::vector<std::string>> removed = CleanupStaleCgroups(layout_);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, IsSupersetOf(stale_dirs));
  for (const std::string& dir : (*live)->paths()) EXPECT_THAT(*removed, Not(Contains(dir)));
  for (const std::string& dir : stale_dirs) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  for (const std::string& dir : (*live)->paths()) EXPECT_TRUE(std::filesystem::exists(dir)) << dir;
  EXPECT_TRUE(KilledBySigkill(orphan.Wait()));
}

// A recycled cgroup is what the next Create gets, and nothing of the run before shows in the
// next one's usage: not its OOM kill, refused forks, CPU time or peak memory. The spare pool is
// shared by every moat on the host, so this binary runs alone under ctest (RUN_SERIAL, see
// sandbox/CMakeLists.txt): a sandbox started beside it would claim the recycled directory.
TEST_F(CgroupRootTest, ARecycledCgroupIsReusedAndCarriesNothingOver) {
  std::set<std::string> v1_parents;
  for (const auto& [controller, mount] : plan_.v1) v1_parents.insert(mount + "/moat");
  // Empty the pool first (spares are interchangeable: other runs just make fresh ones), so that
  // the next Create claims the directories this test recycles.
  std::vector<std::string> drained;
  for (const std::string& parent : v1_parents) {
    for (int i = 0; cgroupfs::ClaimSpareCgroup(parent, Name(absl::StrCat("drained", i))); ++i) {
      drained.push_back(absl::StrCat(parent, "/", Name(absl::StrCat("drained", i))));
    }
  }
  for (const std::string& dir : drained) ::rmdir(dir.c_str());

  absl::StatusOr<std::unique_ptr<Cgroup>> dirty =
      Create("dirty", {.memory_bytes = 32 << 20, .pids = 8, .cpus = 1});
  ASSERT_TRUE(dirty.ok()) << dirty.status();
  TestChild bomb([] {
    testing::BurnCpu(50'000'000);
    for (int i = 0; i < 20; ++i) {
      pid_t pid = ::fork();
      if (pid == 0) {
        ::pause();  // until killed
        ::_exit(0);
      }
      if (pid < 0) break;  // EAGAIN at pids.max: counted in pids.events
    }
    constexpr size_t kSize = 256 << 20;
    volatile char* p = static_cast<char*>(std::malloc(kSize));
    for (size_t i = 0; p != nullptr && i < kSize; i += 4096) p[i] = 1;
    return 0;
  });
  ASSERT_TRUE((*dirty)->AddProcess(bomb.pid()).ok());
  bomb.Release();
  EXPECT_TRUE(KilledBySigkill(bomb.Wait()));
  absl::StatusOr<CgroupUsage> before = (*dirty)->ReadUsage();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_GE(before->oom_kills, 1u);
  EXPECT_GE(before->pids_limit_hits, 1u);
  EXPECT_GE(before->cpu_ns, 45'000'000u);
  EXPECT_GE(before->memory_peak_bytes, 16u << 20);
  std::map<std::string, ino_t> inodes;  // v1 parent -> the recycled directory's inode
  for (const std::string& dir : (*dirty)->paths()) {
    struct stat st;
    ASSERT_EQ(::stat(dir.c_str(), &st), 0) << dir;
    inodes[dir.substr(0, dir.rfind('/'))] = st.st_ino;
  }
  ASSERT_TRUE((*dirty)->Recycle().ok());  // also kills the paused children
  for (const std::string& dir : (*dirty)->paths()) EXPECT_FALSE(std::filesystem::exists(dir));

  absl::StatusOr<std::unique_ptr<Cgroup>> clean =
      Create("clean", {.memory_bytes = 64 << 20, .pids = 16, .cpus = 1});
  ASSERT_TRUE(clean.ok()) << clean.status();
  for (const std::string& dir : (*clean)->paths()) {
    const std::string parent = dir.substr(0, dir.rfind('/'));
    if (!v1_parents.contains(parent)) continue;  // cgroup2 parts are always fresh
    struct stat st;
    ASSERT_EQ(::stat(dir.c_str(), &st), 0) << dir;
    EXPECT_EQ(st.st_ino, inodes[parent]) << dir << " is not the recycled directory";
  }
  if (OnV1("memory"))
    EXPECT_EQ(Read(Dir("memory", "clean") + "/memory.limit_in_bytes"), "67108864\n");
  if (OnV1("pids")) EXPECT_EQ(Read(Dir("pids", "clean") + "/pids.max"), "16\n");
  TestChild quiet([] { return 0; });
  ASSERT_TRUE((*clean)->AddProcess(quiet.pid()).ok());
  quiet.Release();
  EXPECT_EQ(quiet.Wait(), 0);
  absl::StatusOr<CgroupUsage> after = (*clean)->ReadUsage();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->oom_kills, 0u);
  EXPECT_EQ(after->pids_limit_hits, 0u);
  // Less than the dirty run counted (which nothing carried over cannot reach): a bound in
  // milliseconds would be one on speed (a quiet child's fork and exit took 117 ms under
  // emulation, in the real-kernel lane).
  EXPECT_LT(after->cpu_ns, before->cpu_ns);
  EXPECT_LT(after->memory_peak_bytes, 8u << 20);
  ASSERT_TRUE((*clean)->Destroy().ok());
}

TEST_F(CgroupRootTest, CleanupTrimsSparesBeyondThePool) {
  std::vector<std::string> extra;
  for (const auto& [controller, mount] : plan_.v1) {
    const std::string dir = absl::StrCat(mount, "/moat/spare-", cgroupfs::kSpareCgroups + 5);
    ::mkdir((mount + "/moat").c_str(), 0755);
    if (::mkdir(dir.c_str(), 0755) == 0) extra.push_back(dir);
  }
  if (extra.empty()) GTEST_SKIP() << "no cgroup v1 hierarchy here (cgroup2 keeps no spares)";
  absl::StatusOr<std::vector<std::string>> removed = CleanupStaleCgroups(layout_);
  ASSERT_TRUE(removed.ok()) << removed.status();
  // (Another moat's cleanup may get there first, so only the outcome is checked.)
  for (const std::string& dir : extra) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST_F(CgroupRootTest, SplitAcrossV1AndV2WhenCpuacctIsOnlyOnV2) {
  // Make this machine look like a hybrid whose CPU time is only available from cgroup2's
  // cpu.stat: cpu, memory and pids come from v1, the rest from the cgroup2 mount.
  if (layout_.v2_mount.empty() || !OnV1("cpu") || !OnV1("memory") || !OnV1("pids")) {
    GTEST_SKIP() << "needs v1 cpu, memory and pids plus a cgroup2 mount (a hybrid machine)";
  }
  CgroupLayout layout = layout_;
  layout.v1_mounts.erase("cpuacct");
  layout.v1_mounts.erase("freezer");
  absl::StatusOr<std::unique_ptr<Cgroup>> cgroup =
      Cgroup::Create(layout, Name("split"), {.memory_bytes = 64 << 20, .pids = 16, .cpus = 1});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  const std::string v2_dir = layout.v2_mount + "/moat/" + Name("split");
  EXPECT_THAT((*cgroup)->paths(), Contains(v2_dir));
  EXPECT_EQ((*cgroup)->clone_into_fd(), -1);  // CLONE_INTO_CGROUP would miss the v1 part

  TestChild child([] {
    // Fresh pages, charged to the new memory cgroup (a forked child's inherited pages stay
    // charged where they were), so that peak memory is non-zero.
    std::vector<char> touched(4 << 20, 1);
    testing::BurnCpu(50'000'000 + touched[12345]);
    ::pause();
    return 0;
  });
  ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  for (const std::string& dir : (*cgroup)->paths()) {
    EXPECT_EQ(Read(dir + "/cgroup.procs"), absl::StrCat(child.pid(), "\n")) << dir;
  }
  child.Release();
  uint64_t cpu_ns = 0;
  for (absl::Time deadline = absl::Now() + absl::Seconds(10);
       cpu_ns < 45'000'000 && absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(5))) {
    cpu_ns = (*cgroup)->ReadCpuNs().value_or(0);
  }
  EXPECT_GE(cpu_ns, 45'000'000u);  // from v2 cpu.stat
  absl::StatusOr<CgroupUsage> usage = (*cgroup)->ReadUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_GT(usage->memory_peak_bytes, 0u);  // from v1 memory
  ASSERT_TRUE((*cgroup)->Destroy().ok());
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  for (const std::string& dir : (*cgroup)->paths()) EXPECT_FALSE(std::filesystem::exists(dir));
}

// Not a benchmark framework, just numbers for the report: Create, AddProcess (cold: the first
// migration after a quiet period; warm: right after another one), ReadCpuNs, ReadUsage, Destroy.
TEST_F(CgroupRootTest, MeasuresCreateAndAddProcess) {
  constexpr int kRuns = 15;
  std::vector<double> create_ms, add_cold_ms, add_warm_ms, destroy_ms, read_cpu_us, usage_us;
  for (int run = 0; run < kRuns; ++run) {
    absl::SleepFor(absl::Milliseconds(60));  // let the previous migration's RCU window close
    absl::Time t = absl::Now();
    absl::StatusOr<std::unique_ptr<Cgroup>> cgroup =
        Create(absl::StrCat("perf", run), {.memory_bytes = 64 << 20, .pids = 16, .cpus = 1});
    create_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
    ASSERT_TRUE(cgroup.ok()) << cgroup.status();
    TestChild first([] { return 0; });
    TestChild second([] { return 0; });
    t = absl::Now();
    ASSERT_TRUE((*cgroup)->AddProcess(first.pid()).ok());
    add_cold_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
    t = absl::Now();
    ASSERT_TRUE((*cgroup)->AddProcess(second.pid()).ok());
    add_warm_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
    for (const std::string& dir : (*cgroup)->paths()) {
      EXPECT_THAT(Read(dir + "/cgroup.procs"), HasSubstr(absl::StrCat(first.pid())));
    }
    t = absl::Now();
    for (int i = 0; i < 100; ++i) ASSERT_TRUE((*cgroup)->ReadCpuNs().ok());
    read_cpu_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t) / 100);
    t = absl::Now();
    ASSERT_TRUE((*cgroup)->ReadUsage().ok());
    usage_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t));
    first.Release();
    second.Release();
    first.Wait();
    second.Wait();
    t = absl::Now();
    ASSERT_TRUE((*cgroup)->Destroy().ok());
    destroy_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
  }
  auto report = [](const char* what, std::vector<double> v, const char* unit) {
    std::sort(v.begin(), v.end());
    std::cout << what << ": median " << v[v.size() / 2] << " " << unit << ", min " << v.front()
              << ", max " << v.back() << "\n";
  };
  std::cout << "layout: " << layout_.Describe() << ", " << kRuns << " runs\n";
  report("Create()", create_ms, "ms");
  report("AddProcess() cold", add_cold_ms, "ms");
  report("AddProcess() warm", add_warm_ms, "ms");
  report("ReadCpuNs()", read_cpu_us, "us");
  report("ReadUsage()", usage_us, "us");
  report("Destroy() (empty)", destroy_ms, "ms");
}

// RunCgroup (run_cgroup.h): whoever asks first, the run or the v1 warm-up, the run gets one
// cgroup with its name, and only one; recycled when the run ends.
TEST_F(CgroupRootTest, ARunGetsOneCgroupWhoeverMakesIt) {
  const CgroupLimits limits{.memory_bytes = 64 << 20, .pids = 32, .cpus = 1};
  for (int i = 0; i < 12; ++i) {
    const std::string name = Name(absl::StrCat("run-", i));
    std::vector<std::string> paths;
    {
      absl::StatusOr<std::unique_ptr<RunCgroup>> run = RunCgroup::Start(layout_, name, limits);
      ASSERT_TRUE(run.ok()) << run.status();
      if (layout_.kind == CgroupLayout::Kind::kV2) {
        ASSERT_NE((*run)->made(), nullptr) << "v2 clones the child into it: made at once";
      }
      // Half the runs ask at once (racing the warm-up), half after it has had time to make it.
      if (i % 2 == 1) absl::SleepFor(absl::Milliseconds(30));
      absl::StatusOr<Cgroup*> cgroup = (*run)->Get();
      ASSERT_TRUE(cgroup.ok()) << cgroup.status();
      ASSERT_NE(*cgroup, nullptr);
      EXPECT_EQ((*run)->Get().value_or(nullptr), *cgroup) << "one cgroup per run";
      EXPECT_EQ((*run)->made(), *cgroup);
      paths = (*cgroup)->paths();
      ASSERT_FALSE(paths.empty());
      for (const std::string& path : paths) {
        EXPECT_THAT(path, HasSubstr(name));
        EXPECT_TRUE(std::filesystem::is_directory(path)) << path;
      }
    }
    // Recycled: gone, or (v1) an empty spare under another name for the next run.
    for (const std::string& path : paths) EXPECT_FALSE(std::filesystem::exists(path)) << path;
  }
}

TEST_F(CgroupRootTest, ARunsCgroupMadeAheadAndNeverTakenIsRemoved) {
  const std::string name = Name("run-untaken");
  {
    absl::StatusOr<std::unique_ptr<RunCgroup>> run =
        RunCgroup::Start(layout_, name, {.memory_bytes = 64 << 20, .pids = 32, .cpus = 1});
    ASSERT_TRUE(run.ok()) << run.status();
    absl::SleepFor(absl::Milliseconds(30));
  }  // An early error in the run: nobody called Get().
  for (const auto& [controller, mount] : layout_.v1_mounts) {
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(mount, "/moat/", name))) << controller;
  }
}

}  // namespace
}  // namespace moat::sandbox
