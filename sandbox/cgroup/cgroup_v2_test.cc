// cgroup v2: against a fake tree (what is written, what is read back) and, as root, against the
// real cgroup2 mount of this machine (on a hybrid machine it has no controllers, but cpu.stat,
// cgroup.kill, cgroup.freeze and CLONE_INTO_CGROUP are real).
#include "sandbox/cgroup/cgroup_v2.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "sandbox/testing/fake_cgroup_tree.h"
#include "sandbox/testing/test_child.h"

namespace moat::sandbox {
namespace {

using testing::FakeCgroupTree;
using ::testing::HasSubstr;
using testing::TestChild;

constexpr CgroupLimits kLimits{.memory_bytes = 256 << 20, .pids = 64, .cpus = 1.5};
const std::set<std::string> kAll = {"cpu", "memory", "pids"};

class CgroupV2FakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_ = tree_.AddV2Mount("cgroup", "cpuset cpu io memory pids");
    tree_.PopulateV2(mount_ + "/moat", {});
  }
  // The leaf a kernel would have created on mkdir.
  std::string Leaf(const FakeCgroupTree::V2Files& files = {}) {
    const std::string leaf = mount_ + "/moat/42-sandbox";
    tree_.PopulateV2(leaf, files);
    return leaf;
  }
  // The sandbox's cgroup "42-sandbox" with every controller and kLimits (the test makes its leaf).
  absl::StatusOr<std::unique_ptr<CgroupV2>> Create() {
    return CgroupV2::Create(mount_, kAll, "42-sandbox", kLimits);
  }
  static std::string Read(const std::string& path) { return FakeCgroupTree::Read(path); }

  FakeCgroupTree tree_;
  std::string mount_;
};

TEST_F(CgroupV2FakeTest, EnablesControllersAndWritesLimits) {
  const std::string leaf = Leaf();
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  EXPECT_EQ(Read(mount_ + "/cgroup.subtree_control"), "+cpu +memory +pids");
  EXPECT_EQ(Read(mount_ + "/moat/cgroup.subtree_control"), "+cpu +memory +pids");
  EXPECT_EQ(Read(leaf + "/cpu.max"), "150000 100000");
  EXPECT_EQ(Read(leaf + "/memory.max"), "268435456");
  EXPECT_EQ(Read(leaf + "/memory.swap.max"), "0");
  EXPECT_EQ(Read(leaf + "/pids.max"), "64");
  EXPECT_THAT((*cgroup)->paths(), ::testing::ElementsAre(leaf));
  EXPECT_GE((*cgroup)->clone_into_fd(), 0);
}

TEST_F(CgroupV2FakeTest, WritesOnlyControllersNotYetEnabled) {
  FakeCgroupTree::Write(mount_ + "/cgroup.subtree_control", "cpu memory pids\n");
  FakeCgroupTree::Write(mount_ + "/moat/cgroup.subtree_control", "memory\n");
  Leaf();
  ASSERT_TRUE(Create().ok());
  EXPECT_EQ(Read(mount_ + "/cgroup.subtree_control"), "cpu memory pids\n");  // untouched
  EXPECT_EQ(Read(mount_ + "/moat/cgroup.subtree_control"), "+cpu +pids");
}

TEST_F(CgroupV2FakeTest, OnlyTheGivenControllersGetLimits) {
  const std::string leaf = Leaf();
  ASSERT_TRUE(CgroupV2::Create(mount_, {"memory"}, "42-sandbox", kLimits).ok());
  EXPECT_EQ(Read(mount_ + "/cgroup.subtree_control"), "+memory");
  EXPECT_EQ(Read(leaf + "/memory.max"), "268435456");
  EXPECT_EQ(Read(leaf + "/cpu.max"), "max 100000\n");
  EXPECT_EQ(Read(leaf + "/pids.max"), "max\n");
}

TEST_F(CgroupV2FakeTest, NoSwapFileNoSwapLimit) {
  const std::string leaf = Leaf({.swap = false});
  ASSERT_TRUE(Create().ok());
  EXPECT_FALSE(std::filesystem::exists(leaf + "/memory.swap.max"));
}

TEST_F(CgroupV2FakeTest, ReadsUsageBack) {
  const std::string leaf = Leaf();
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  FakeCgroupTree::Write(leaf + "/cpu.stat",
                        "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n");
  FakeCgroupTree::Write(leaf + "/memory.peak", "7340032\n");
  FakeCgroupTree::Write(leaf + "/memory.current", "4096\n");
  FakeCgroupTree::Write(leaf + "/memory.events",
                        "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n");
  EXPECT_EQ(*(*cgroup)->ReadCpuNs(), 1234567000u);
  absl::StatusOr<CgroupUsage> usage = (*cgroup)->ReadUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->cpu_ns, 1234567000u);
  EXPECT_EQ(usage->memory_peak_bytes, 7340032u);
  EXPECT_EQ(usage->oom_kills, 2u);
  EXPECT_EQ(usage->pids_limit_hits, 0u);  // no pids.events yet: none counted
  FakeCgroupTree::Write(leaf + "/pids.events", "max 5\n");
  EXPECT_EQ((*cgroup)->ReadUsage()->pids_limit_hits, 5u);
  // The kept descriptor sees new content: cpu.stat is re-read from offset 0 each time.
  FakeCgroupTree::Write(leaf + "/cpu.stat", "usage_usec 2000000\n");
  EXPECT_EQ(*(*cgroup)->ReadCpuNs(), 2000000000u);
}

TEST_F(CgroupV2FakeTest, PeakFallsBackToCurrentWithoutMemoryPeak) {
  const std::string leaf = Leaf({.peak = false});
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  FakeCgroupTree::Write(leaf + "/memory.current", "4096\n");
  EXPECT_EQ((*cgroup)->ReadUsage()->memory_peak_bytes, 4096u);
}

TEST_F(CgroupV2FakeTest, MalformedCpuStatIsAnErrorNamingTheFile) {
  const std::string leaf = Leaf();
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  FakeCgroupTree::Write(leaf + "/cpu.stat", "user_usec 5\n");
  absl::StatusOr<uint64_t> cpu = (*cgroup)->ReadCpuNs();
  EXPECT_FALSE(cpu.ok());
  EXPECT_THAT(cpu.status().message(), HasSubstr("usage_usec"));
  EXPECT_THAT(cpu.status().message(), HasSubstr(leaf + "/cpu.stat"));
}

TEST_F(CgroupV2FakeTest, RefusesALeafThatHasProcesses) {
  const std::string leaf = Leaf();
  FakeCgroupTree::Write(leaf + "/cgroup.procs", absl::StrCat(getpid(), "\n"));
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create();
  EXPECT_EQ(cgroup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(cgroup.status().message(), HasSubstr("\"" + leaf + "\""));
  EXPECT_EQ(Read(leaf + "/pids.max"), "max\n");  // not taken over
}

TEST_F(CgroupV2FakeTest, FailureAfterMkdirRemovesTheLeaf) {
  // mkdir in a plain directory creates no control files, so writing cpu.max fails: the half-made
  // cgroup must not stay behind.
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup =
      CgroupV2::Create(mount_, kAll, "43-fresh", kLimits);
  EXPECT_EQ(cgroup.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(cgroup.status().message(), HasSubstr("cpu.max"));
  EXPECT_FALSE(std::filesystem::exists(mount_ + "/moat/43-fresh"));
}

TEST_F(CgroupV2FakeTest, UnreadableSubtreeControlIsAnErrorNamingTheFile) {
  std::filesystem::remove(mount_ + "/moat/cgroup.subtree_control");
  Leaf();
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create();
  EXPECT_FALSE(cgroup.ok());
  EXPECT_THAT(cgroup.status().message(), HasSubstr(mount_ + "/moat/cgroup.subtree_control"));
}

// Plays the kernel for cgroup.procs: drops pids of processes that have died (reaping them, as
// they are our children) and, when "1" is written to cgroup.kill, kills what is listed.
class ProcsEmulator {
 public:
  ProcsEmulator(std::string leaf, pid_t child) : leaf_(std::move(leaf)), child_(child) {
    FakeCgroupTree::Write(leaf_ + "/cgroup.procs", absl::StrCat(child_, "\n"));
    thread_ = std::thread([this] { Run(); });
  }
  ~ProcsEmulator() {
    stop_ = true;
    thread_.join();
  }
  int wait_status() const { return wait_status_; }

 private:
  void Run() {
    while (!stop_) {
      if (FakeCgroupTree::Read(leaf_ + "/cgroup.kill") == "1") ::kill(child_, SIGKILL);
      int status = 0;
      if (::waitpid(child_, &status, WNOHANG) == child_) {
        wait_status_ = status;
        FakeCgroupTree::Write(leaf_ + "/cgroup.procs", "");
        return;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  const std::string leaf_;
  const pid_t child_;
  std::atomic<bool> stop_ = false;
  std::atomic<int> wait_status_ = -1;
  std::thread thread_;
};

TEST_F(CgroupV2FakeTest, KillAllWritesCgroupKillAndWaitsUntilEmpty) {
  const std::string leaf = Leaf();
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ProcsEmulator emulator(leaf, child);
  ASSERT_TRUE((*cgroup)->KillAll().ok());
  EXPECT_EQ(Read(leaf + "/cgroup.kill"), "1");
  EXPECT_EQ(Read(leaf + "/cgroup.procs"), "");
}

TEST_F(CgroupV2FakeTest, KillAllWithoutCgroupKillFreezesKillsAndThaws) {
  const std::string leaf = Leaf({.kill = false});
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create();
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  FakeCgroupTree::Write(leaf + "/cgroup.events", "populated 1\nfrozen 1\n");
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  int status = -1;
  {
    ProcsEmulator emulator(leaf, child);
    ASSERT_TRUE((*cgroup)->KillAll().ok());
    status = emulator.wait_status();
  }
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;  // our SIGKILL
  EXPECT_EQ(Read(leaf + "/cgroup.freeze"), "0");                              // thawed at the end
  EXPECT_FALSE(std::filesystem::exists(leaf + "/cgroup.kill"));
}

// ---- the real cgroup2 mount
// ----------------------------------------------------------------------

class CgroupV2RealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout();
    ASSERT_TRUE(layout.ok()) << layout.status();
    if (layout->v2_mount.empty()) GTEST_SKIP() << "no cgroup2 mount on this machine";
    mount_ = layout->v2_mount;
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // grandchildren come back to us to be reaped
  }
  void TearDown() override { testing::ReapAll(); }
  std::string Name(const std::string& what) { return absl::StrCat(getpid(), "-v2test-", what); }

  // No controllers: a hybrid machine's cgroup2 mount offers none; cpu.stat is always there.
  absl::StatusOr<std::unique_ptr<CgroupV2>> Create(const std::string& what) {
    return CgroupV2::Create(mount_, {}, Name(what), kLimits);
  }

  std::string mount_;
};

TEST_F(CgroupV2RealTest, AddProcessReadCpuKillAllDestroy) {
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create("basic");
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  const std::string dir = (*cgroup)->paths().at(0);
  EXPECT_EQ(dir, mount_ + "/moat/" + Name("basic"));
  EXPECT_TRUE(std::filesystem::is_directory(dir));

  TestChild child([] {
    testing::BurnCpu(100'000'000);  // 100 ms
    ::pause();
    return 0;
  });
  ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  EXPECT_EQ(FakeCgroupTree::Read(dir + "/cgroup.procs"), absl::StrCat(child.pid(), "\n"));
  child.Release();
  // The child pauses once it has used 100 ms, of which all but its first instants (before the
  // move) are charged to the cgroup.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  uint64_t cpu_ns = 0;
  while (absl::Now() < deadline) {
    absl::StatusOr<uint64_t> read = (*cgroup)->ReadCpuNs();
    ASSERT_TRUE(read.ok()) << read.status();
    cpu_ns = *read;
    if (cpu_ns >= 90'000'000) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(cpu_ns, 90'000'000u);
  EXPECT_LT(cpu_ns, 1'000'000'000u);
  // The child may still be finishing its last milliseconds of CPU between the two readings:
  // they must agree, up to that.
  const uint64_t from_usage = (*cgroup)->ReadUsage()->cpu_ns;
  const uint64_t from_cpu = (*cgroup)->ReadCpuNs().value();
  EXPECT_LE(from_usage, from_cpu);
  EXPECT_LT(from_cpu - from_usage, 50'000'000u);

  ASSERT_TRUE((*cgroup)->KillAll().ok());
  EXPECT_EQ(FakeCgroupTree::Read(dir + "/cgroup.procs"), "");
  int status = child.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  ASSERT_TRUE((*cgroup)->Destroy().ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_TRUE((*cgroup)->Destroy().ok());  // idempotent
}

TEST_F(CgroupV2RealTest, CloneIntoCgroupPlacesTheChildAndAddProcessIsANoOp) {
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create("clone");
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  ASSERT_GE((*cgroup)->clone_into_fd(), 0);
  struct clone_args args = {};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>((*cgroup)->clone_into_fd());
  long pid = ::syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(pid, 0) << "clone3: " << strerror(errno);
  const std::string procs = (*cgroup)->paths().at(0) + "/cgroup.procs";
  EXPECT_EQ(FakeCgroupTree::Read(procs), absl::StrCat(pid, "\n"));
  EXPECT_THAT(FakeCgroupTree::Read(absl::StrCat("/proc/", pid, "/cgroup")),
              HasSubstr("0::/moat/" + Name("clone")));
  absl::Time start = absl::Now();
  EXPECT_TRUE((*cgroup)->AddProcess(static_cast<pid_t>(pid)).ok());
  std::cout << "AddProcess of a child already cloned into the cgroup: "
            << absl::FormatDuration(absl::Now() - start) << "\n";
  ASSERT_TRUE((*cgroup)->Destroy().ok());
  int status = 0;
  ::waitpid(static_cast<pid_t>(pid), &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST_F(CgroupV2RealTest, KillAllReachesAForkingTree) {
  absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create("tree");
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  TestChild child([] {
    // Five chains of ten processes, each forking the next: KillAll must not miss late forks.
    for (int i = 0; i < 5; ++i) {
      if (::fork() == 0) {
        for (int depth = 0; depth < 10 && ::fork() == 0; ++depth) {
        }
        ::pause();
      }
    }
    ::pause();
    return 0;
  });
  ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  child.Release();
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE((*cgroup)->KillAll().ok());
  EXPECT_EQ(FakeCgroupTree::Read((*cgroup)->paths().at(0) + "/cgroup.procs"), "");
  EXPECT_TRUE(WIFSIGNALED(child.Wait()));
}

TEST_F(CgroupV2RealTest, DestructorKillsAndRemoves) {
  std::string dir;
  TestChild child([] {
    ::pause();
    return 0;
  });
  {
    absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup = Create("dtor");
    ASSERT_TRUE(cgroup.ok()) << cgroup.status();
    dir = (*cgroup)->paths().at(0);
    ASSERT_TRUE((*cgroup)->AddProcess(child.pid()).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
  int status = child.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST_F(CgroupV2RealTest, ADelegatedCgroupHoldingMoatItselfGetsItMovedAside) {
  // cgroup v2's "no internal processes" rule: a Delegate=yes unit whose cgroup holds moat cannot
  // hand controllers to children until moat moves into a child of its own.
  absl::StatusOr<std::string> offered = cgroupfs::ReadFile(mount_ + "/cgroup.controllers");
  if (!offered.ok() || !absl::StrContains(*offered, "pids")) {
    GTEST_SKIP() << "the cgroup2 mount offers no pids controller (a hybrid layout)";
  }
  const std::string unit = absl::StrCat(mount_, "/", getpid(), "-v2test-unit");
  ASSERT_TRUE(EnableSubtreeControllers(mount_, {"pids"}).ok());
  ASSERT_TRUE(cgroupfs::MakeDir(unit).ok());
  // The child plays moat started in the unit: the unit cgroup's only process.
  const pid_t pid = fork();
  if (pid == 0) {
    if (!cgroupfs::WriteFile(unit + "/cgroup.procs", "0").ok()) _exit(10);
    absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup =
        CgroupV2::Create(unit, {"pids"}, "sandbox", kLimits);
    if (!cgroup.ok()) {
      fprintf(stderr, "%s\n", cgroup.status().ToString().c_str());
      _exit(11);
    }
    absl::StatusOr<std::string> self = cgroupfs::ReadFile("/proc/self/cgroup");
    if (!self.ok() || !absl::StrContains(*self, absl::StrCat("-v2test-unit/", kSupervisorDir))) {
      _exit(12);
    }
    if (cgroupfs::ReadFile(unit + "/moat/sandbox/pids.max").value_or("") != "64\n") _exit(13);
    _exit((*cgroup)->Destroy().ok() ? 0 : 14);
  }
  int status = -1;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  for (const char* dir : {"/moat-supervisor", "/moat", ""}) {
    EXPECT_EQ(::rmdir(absl::StrCat(unit, dir).c_str()), 0) << unit << dir;
  }
}

}  // namespace
}  // namespace moat::sandbox
