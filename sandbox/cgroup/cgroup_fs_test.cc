#include "sandbox/cgroup/cgroup_fs.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "sandbox/testing/fake_cgroup_tree.h"
#include "sandbox/testing/test_child.h"

namespace moat::sandbox::cgroupfs {
namespace {

using testing::FakeCgroupTree;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// A leaf cgroup in `tree` whose cgroup.procs lists `procs`.
std::string LeafListing(const FakeCgroupTree& tree, const std::string& procs) {
  const std::string dir = tree.Path("leaf");
  std::filesystem::create_directories(dir);
  FakeCgroupTree::Write(dir + "/cgroup.procs", procs);
  return dir;
}

TEST(CgroupFsTest, CpuQuota) {
  EXPECT_EQ(CpuQuotaUs(1), 100000u);
  EXPECT_EQ(CpuQuotaUs(0.5), 50000u);
  EXPECT_EQ(CpuQuotaUs(2.25), 225000u);
  EXPECT_EQ(CpuQuotaUs(0.01), 1000u);
}

TEST(CgroupFsTest, ParsesCountsAndKeyedFiles) {
  EXPECT_EQ(*ParseCount(" 42\n", "f"), 42u);
  absl::StatusOr<uint64_t> bad = ParseCount("max\n", "/x/pids.max");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"/x/pids.max\""));

  constexpr char kStat[] = "usage_usec 17\nuser_usec 10\nsystem_usec 7\nnr_periods 0\n";
  EXPECT_EQ(*KeyedValue(kStat, "usage_usec", "cpu.stat"), 17u);
  EXPECT_EQ(*KeyedValue(kStat, "system_usec", "cpu.stat"), 7u);
  EXPECT_EQ(KeyedValue(kStat, "usage", "cpu.stat").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(KeyedValue("oom_kill x\n", "oom_kill", "f").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CgroupFsTest, ReadWriteAndErrorsNameThePath) {
  FakeCgroupTree tree;
  const std::string file = tree.Path("pids.max");
  FakeCgroupTree::Write(file, "max\n");
  ASSERT_TRUE(WriteFile(file, "12").ok());
  EXPECT_EQ(*ReadFile(file), "12");

  absl::Status missing = WriteFile(tree.Path("nope"), "1");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("\"" + tree.Path("nope") + "\""));
  EXPECT_THAT(ReadFile(tree.Path("nope")).status().message(), HasSubstr(tree.Path("nope")));
}

TEST(CgroupFsTest, PermissionErrorsSayHowToGetPermission) {
  // sysfs refuses writes to a read-only attribute with EACCES, even for root.
  const std::string read_only = "/sys/kernel/uevent_seqnum";
  if (!Exists(read_only)) GTEST_SKIP() << "no " << read_only;
  absl::Status status = WriteFile(read_only, "1");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("run moat as root"));
  EXPECT_THAT(status.message(), HasSubstr("under <hierarchy>/moat"));
}

TEST(CgroupFsTest, PreadFileSeesNewContent) {
  FakeCgroupTree tree;
  const std::string file = tree.Path("cpuacct.usage");
  FakeCgroupTree::Write(file, "1\n");
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(*PreadFile(fd, file), "1\n");
  FakeCgroupTree::Write(file, "123456\n");
  EXPECT_EQ(*PreadFile(fd, file), "123456\n");
  ::close(fd);
  EXPECT_THAT(PreadFile(fd, file).status().message(), HasSubstr(file));
}

TEST(CgroupFsTest, MakeDirAndRemoveTree) {
  FakeCgroupTree tree;
  const std::string dir = tree.Path("moat");
  EXPECT_TRUE(*MakeDir(dir));
  EXPECT_FALSE(*MakeDir(dir));  // already there
  ASSERT_TRUE(*MakeDir(dir + "/a"));
  ASSERT_TRUE(*MakeDir(dir + "/a/b"));
  ASSERT_TRUE(*MakeDir(dir + "/c"));
  ASSERT_TRUE(RemoveTree(dir, absl::Milliseconds(10)).ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_TRUE(RemoveTree(dir, absl::Milliseconds(10)).ok());  // gone already: fine
  EXPECT_THAT(MakeDir(tree.Path("x/y")).status().message(), HasSubstr("create cgroup"));
}

TEST(CgroupFsTest, ListProcessesIncludesSubCgroups) {
  FakeCgroupTree tree;
  const std::string dir = tree.Path("leaf");
  std::filesystem::create_directories(dir + "/child");
  FakeCgroupTree::Write(dir + "/cgroup.procs", "10\n11\n");
  FakeCgroupTree::Write(dir + "/child/cgroup.procs", "12\n");
  EXPECT_THAT(*ListProcesses(dir), UnorderedElementsAre(10, 11, 12));
  EXPECT_TRUE(ListProcesses(tree.Path("gone"))->empty());
}

TEST(CgroupFsTest, KillListedSparesAPidNoLongerListed) {
  // Between the listing and the kill, a pid may leave the cgroup (and be reused): only pids that
  // are still listed once pinned by a pidfd are signalled.
  FakeCgroupTree tree;
  const std::string dir = tree.Path("leaf");
  std::filesystem::create_directories(dir);
  testing::TestChild listed([] { return 0; });
  testing::TestChild gone([] { return 0; });
  FakeCgroupTree::Write(dir + "/cgroup.procs", absl::StrCat(listed.pid(), "\n"));
  ASSERT_TRUE(KillListed({listed.pid(), gone.pid()}, {dir}).ok());
  int status = listed.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  gone.Release();
  status = gone.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(CgroupFsTest, KillUntilEmptyGivesUpWithTheRemainingPids) {
  FakeCgroupTree tree;
  // Above any pid_max: never exists, so never leaves the (fake) list.
  const std::string dir = LeafListing(tree, "999999999\n");
  int freezes = 0;
  int thaws = 0;
  absl::Status status = KillUntilEmpty({dir},
                                       {.freeze = [&] { return ++freezes, absl::OkStatus(); },
                                        .thaw = [&] { return ++thaws, absl::OkStatus(); }},
                                       absl::Milliseconds(50));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("999999999"));
  EXPECT_THAT(status.message(), HasSubstr("\"" + dir + "\""));
  EXPECT_GE(freezes, 1);
  EXPECT_EQ(freezes, thaws);  // every freeze is undone
}

TEST(CgroupFsTest, KillUntilEmptyOnAnEmptyCgroupDoesNothing) {
  FakeCgroupTree tree;
  const std::string dir = LeafListing(tree, "");
  int freezes = 0;
  ASSERT_TRUE(
      KillUntilEmpty({dir}, {.freeze = [&] { return ++freezes, absl::OkStatus(); }}, kKillTimeout)
          .ok());
  EXPECT_EQ(freezes, 0);
}

}  // namespace
}  // namespace moat::sandbox::cgroupfs
