// DetachFromCreator on a stand-in tree (which hierarchies it moves a process in, and a v1
// cpuset's cpus and mems) and, as root, on this machine's real cgroups.
#include "sandbox/cgroup/cgroup_detach.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/testing/fake_cgroup_tree.h"
#include "sandbox/testing/test_child.h"

namespace moat::sandbox {
namespace {

using testing::FakeCgroupTree;
using ::testing::HasSubstr;

TEST(DetachFromCreatorTest, MovesTheProcessWhereverItHasNoCgroupOfItsOwn) {
  FakeCgroupTree tree;
  const std::string memory = tree.AddV1Mount("memory", "rw,memory");
  const std::string devices = tree.AddV1Mount("devices", "rw,devices");
  const std::string systemd = tree.AddV1Mount("systemd", "rw,xattr,name=systemd");
  const std::string v2 = tree.AddV2Mount("unified", "");
  absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout(tree.WriteMountinfo());
  ASSERT_TRUE(layout.ok()) << layout.status();

  // The sandbox's own cgroup is in the memory hierarchy only. A plain directory grows no
  // control files: the kernel's cgroup.procs is made here.
  const std::string own = absl::StrCat(memory, "/moat/keep-sb-1");
  std::filesystem::create_directories(own);
  for (const std::string& hierarchy : {devices, systemd, v2}) {
    std::filesystem::create_directories(hierarchy + "/moat/detached");
    FakeCgroupTree::Write(hierarchy + "/moat/detached/cgroup.procs", "");
  }
  absl::Status status = DetachFromCreator(*layout, 4242, {own});
  ASSERT_TRUE(status.ok()) << status;
  for (const std::string& hierarchy : {devices, systemd, v2}) {
    EXPECT_EQ(FakeCgroupTree::Read(hierarchy + "/moat/detached/cgroup.procs"), "4242") << hierarchy;
  }
  EXPECT_FALSE(std::filesystem::exists(memory + "/moat/detached")) << "it has a cgroup there";
}

TEST(DetachFromCreatorTest, ACpusetCgroupGetsItsParentsCpusAndMems) {
  FakeCgroupTree tree;
  const std::string cpuset = tree.AddV1Mount("cpuset", "rw,cpuset");
  FakeCgroupTree::Write(cpuset + "/cpuset.cpus", "0-3\n");
  FakeCgroupTree::Write(cpuset + "/cpuset.mems", "0\n");
  // As the kernel makes them: empty.
  for (const std::string& dir : {cpuset + "/moat", cpuset + "/moat/detached"}) {
    std::filesystem::create_directories(dir);
    FakeCgroupTree::Write(dir + "/cpuset.cpus", "\n");
    FakeCgroupTree::Write(dir + "/cpuset.mems", "\n");
    FakeCgroupTree::Write(dir + "/cgroup.procs", "");
  }
  FakeCgroupTree::Write(cpuset + "/moat/cpuset.mems", "0\n");  // set already: kept
  absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout(tree.WriteMountinfo());
  ASSERT_TRUE(layout.ok()) << layout.status();

  absl::Status status = DetachFromCreator(*layout, 7, {});
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(FakeCgroupTree::Read(cpuset + "/moat/cpuset.cpus"), "0-3");
  EXPECT_EQ(FakeCgroupTree::Read(cpuset + "/moat/detached/cpuset.cpus"), "0-3");
  EXPECT_EQ(FakeCgroupTree::Read(cpuset + "/moat/detached/cpuset.mems"), "0");
  EXPECT_EQ(FakeCgroupTree::Read(cpuset + "/moat/detached/cgroup.procs"), "7");
}

TEST(DetachFromCreatorTest, AFailureNamesTheHierarchy) {
  FakeCgroupTree tree;
  const std::string devices = tree.AddV1Mount("devices", "rw,devices");
  absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout(tree.WriteMountinfo());
  ASSERT_TRUE(layout.ok()) << layout.status();
  FakeCgroupTree::Write(devices + "/moat", "a file where the directory goes");
  absl::Status status = DetachFromCreator(*layout, 7, {});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("hierarchy \"", devices, "\"")));
}

// As root, on this machine's hierarchies: a child of this test ends up in moat/detached in every
// hierarchy it had no moat cgroup in, so it is no longer where this test is.
TEST(DetachFromCreatorTest, OnTheRealHierarchiesTheChildLeavesItsParentsCgroups) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to move processes between cgroups";
  absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  testing::TestChild child([] { return 0; });
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(DetachFromCreator(*layout, child.pid(), {}).ok());
  const std::string cgroups = FakeCgroupTree::Read(absl::StrCat("/proc/", child.pid(), "/cgroup"));
  int hierarchies = 0;
  for (absl::string_view line : absl::StrSplit(cgroups, '\n', absl::SkipEmpty())) {
    // "id:controllers:path"; a hierarchy that is not mounted (none here) would keep the parent's.
    const std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    ASSERT_EQ(parts.size(), 3u) << line;
    if (layout->v2_mount.empty() && parts[0] == "0") continue;
    EXPECT_TRUE(absl::EndsWith(parts[2], "/moat/detached")) << line;
    ++hierarchies;
  }
  EXPECT_EQ(hierarchies,
            static_cast<int>(layout->v1_hierarchies.size()) + (layout->v2_mount.empty() ? 0 : 1));
  child.Release();
}

}  // namespace
}  // namespace moat::sandbox
