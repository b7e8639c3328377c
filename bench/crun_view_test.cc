#include "bench/crun_view.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "bench/timed_run.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::bench {
namespace {

// The layout as /proc/self/mountinfo tells it, independently of the statfs calls under test.
CgroupLayout LayoutFromMountinfo() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  bool cgroup2_at_root = false, cgroup2_at_unified = false;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point, field;
    fields >> id >> parent >> dev >> root >> mount_point;
    while (fields >> field && field != "-") {
    }
    std::string fstype;
    fields >> fstype;
    if (fstype != "cgroup2") continue;
    if (mount_point == "/sys/fs/cgroup") cgroup2_at_root = true;
    if (mount_point == "/sys/fs/cgroup/unified") cgroup2_at_unified = true;
  }
  if (cgroup2_at_root) return CgroupLayout::kUnified;
  return cgroup2_at_unified ? CgroupLayout::kHybrid : CgroupLayout::kLegacy;
}

TEST(DetectCgroupHostTest, AgreesWithMountinfo) {
  absl::StatusOr<CgroupHost> host = DetectCgroupHost();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->layout, LayoutFromMountinfo());
  if (host->layout == CgroupLayout::kHybrid) {
    std::ifstream in("/sys/fs/cgroup/unified/cgroup.controllers");
    std::string first;
    in >> first;
    EXPECT_EQ(host->unified_controllers.substr(0, first.size()), first);
  }
}

TEST(DetectCgroupHostTest, PlainDirectoryIsNotACgroupRoot) {
  absl::StatusOr<CgroupHost> host = DetectCgroupHost("/etc");
  EXPECT_FALSE(host.ok());
}

TEST(CrunRefusesCgroupsTest, OnlyHybridWithCgroup2Controllers) {
  EXPECT_TRUE(CrunRefusesCgroups({CgroupLayout::kHybrid, "hugetlb"}));
  EXPECT_FALSE(CrunRefusesCgroups({CgroupLayout::kHybrid, ""}));
  EXPECT_FALSE(CrunRefusesCgroups({CgroupLayout::kLegacy, ""}));
  EXPECT_FALSE(CrunRefusesCgroups({CgroupLayout::kUnified, "cpu memory"}));
}

class PrepareCrunViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "making a mount namespace needs root";
    char dir[] = "/tmp/crun_view_test.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    rootfs_ = dir;
  }
  void TearDown() override {
    if (!rootfs_.empty()) {
      EXPECT_EQ(::rmdir(rootfs_.c_str()), 0) << "rootfs not empty on the host";
    }
  }
  // Runs a shell script inside the view; true when it exits 0.
  bool InView(const CrunView& view, const std::string& script) {
    RunSpec spec{{"/bin/sh", "-c", script}, CurrentEnvironment(), view.mount_ns.get()};
    absl::StatusOr<RunOutcome> out = TimedRun(spec);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() && Succeeded(*out);
  }
  std::string rootfs_;
};

TEST_F(PrepareCrunViewTest, HostRootIsReadOnlyAtTheRootfsOnlyInsideTheView) {
  absl::StatusOr<CrunView> view = PrepareCrunView(rootfs_);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(InView(*view, "test -x " + rootfs_ + "/bin/true"));
  // Read-only, and recursively: /dev/shm is a separate tmpfs mount on this kind of host.
  EXPECT_TRUE(InView(*view, "! touch " + rootfs_ + "/tmp/crun_view_probe 2>/dev/null"));
  EXPECT_TRUE(InView(
      *view, "test ! -d /dev/shm || ! touch " + rootfs_ + "/dev/shm/crun_view_probe 2>/dev/null"));
  // Nothing leaked to the host: the directory is still empty here.
  struct stat st;
  EXPECT_NE(::stat((rootfs_ + "/bin").c_str(), &st), 0);
}

TEST_F(PrepareCrunViewTest, HidesCgroup2ExactlyWhenCrunWouldRefuse) {
  absl::StatusOr<CgroupHost> host = DetectCgroupHost();
  ASSERT_TRUE(host.ok()) << host.status();
  absl::StatusOr<CrunView> view = PrepareCrunView(rootfs_);
  ASSERT_TRUE(view.ok()) << view.status();
  const std::string is_cgroup2 = "test \"$(stat -f -c %T /sys/fs/cgroup/unified)\" = cgroup2fs";
  if (CrunRefusesCgroups(*host)) {
    EXPECT_FALSE(InView(*view, is_cgroup2));
    EXPECT_THAT(view->notes.front(), ::testing::HasSubstr("hybrid"));
  }
  // The host keeps its own view either way.
  const CgroupLayout layout_after = DetectCgroupHost()->layout;
  EXPECT_EQ(layout_after, host->layout);
}

TEST_F(PrepareCrunViewTest, MissingRootfsIsAnErrorNamingIt) {
  absl::StatusOr<CrunView> view = PrepareCrunView(rootfs_ + "/missing");
  ASSERT_FALSE(view.ok());
  EXPECT_THAT(view.status().message(), ::testing::HasSubstr(rootfs_ + "/missing"));
}

}  // namespace
}  // namespace moat::bench
