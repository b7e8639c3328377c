// The spare pool's renames, on a plain directory tree (cgroupfs-specific behaviour, such as
// EEXIST for an existing target, is covered by the real-cgroup tests in cgroup_root_test.cc).
#include "sandbox/cgroup/cgroup_spares.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "sandbox/testing/fake_cgroup_tree.h"

namespace moat::sandbox::cgroupfs {
namespace {

using testing::FakeCgroupTree;
namespace fs = std::filesystem;

class CgroupSparesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    parent_ = tree_.Path("memory/moat");
    fs::create_directories(parent_);
  }
  // A cgroup directory as the kernel shows one: never empty (a plain rename onto an empty
  // directory would replace it, which cgroupfs never does).
  std::string MakeCgroup(const std::string& name, const std::string& marker = "") {
    const std::string dir = absl::StrCat(parent_, "/", name);
    tree_.PopulateV1(dir, {"memory"});
    FakeCgroupTree::Write(dir + "/marker", marker.empty() ? name : marker);
    return dir;
  }
  std::string At(const std::string& name) const { return absl::StrCat(parent_, "/", name); }

  FakeCgroupTree tree_;
  std::string parent_;
};

TEST(SpareIndexTest, ParsesOnlyTheNamesMoatMakes) {
  EXPECT_EQ(SpareIndex("spare-0"), 0);
  EXPECT_EQ(SpareIndex("spare-7"), 7);
  EXPECT_EQ(SpareIndex("spare-12"), 12);  // out of the pool's range, but a spare: cleanup trims it
  for (const char* other : {"spare-", "spare-x", "spare-+1", "spare- 1", "spare-1a", "spare",
                            "42-run", "1234-0", "spares-1", "spare-1234567890"}) {
    EXPECT_EQ(SpareIndex(other), std::nullopt) << other;
  }
}

TEST_F(CgroupSparesTest, ClaimRenamesASpareToTheGivenName) {
  MakeCgroup("spare-0", "from spare-0");
  ASSERT_TRUE(ClaimSpareCgroup(parent_, "42-0"));
  EXPECT_FALSE(fs::exists(At("spare-0")));
  EXPECT_EQ(FakeCgroupTree::Read(At("42-0/marker")), "from spare-0");
}

TEST_F(CgroupSparesTest, ClaimSkipsSparesThatAreGone) {
  MakeCgroup("spare-5", "from spare-5");  // 0..4 were claimed by others meanwhile
  ASSERT_TRUE(ClaimSpareCgroup(parent_, "42-0"));
  EXPECT_EQ(FakeCgroupTree::Read(At("42-0/marker")), "from spare-5");
  EXPECT_FALSE(ClaimSpareCgroup(parent_, "42-1")) << "the pool is empty now";
  EXPECT_FALSE(fs::exists(At("42-1")));
}

TEST_F(CgroupSparesTest, ClaimOutOfRangeOrMissingParentFindsNothing) {
  MakeCgroup(absl::StrCat("spare-", kSpareCgroups));
  EXPECT_FALSE(ClaimSpareCgroup(parent_, "42-0"));
  EXPECT_FALSE(ClaimSpareCgroup(tree_.Path("nowhere/moat"), "42-0"));
}

TEST_F(CgroupSparesTest, ClaimNeverReplacesAnExistingCgroup) {
  MakeCgroup("spare-0", "spare");
  MakeCgroup("42-0", "live sandbox");
  EXPECT_FALSE(ClaimSpareCgroup(parent_, "42-0"));
  EXPECT_EQ(FakeCgroupTree::Read(At("42-0/marker")), "live sandbox");
  EXPECT_EQ(FakeCgroupTree::Read(At("spare-0/marker")), "spare");
}

TEST_F(CgroupSparesTest, ReturnTakesTheFirstFreeSpareName) {
  MakeCgroup("spare-0");
  MakeCgroup("spare-1");
  const std::string dir = MakeCgroup("42-0", "returned");
  ASSERT_TRUE(ReturnSpareCgroup(dir));
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(FakeCgroupTree::Read(At("spare-2/marker")), "returned");
  EXPECT_EQ(FakeCgroupTree::Read(At("spare-0/marker")), "spare-0");  // untouched
}

TEST_F(CgroupSparesTest, ReturnToAFullPoolLeavesTheDirectory) {
  for (int k = 0; k < kSpareCgroups; ++k) MakeCgroup(absl::StrCat("spare-", k));
  const std::string dir = MakeCgroup("42-0", "returned");
  EXPECT_FALSE(ReturnSpareCgroup(dir));
  EXPECT_EQ(FakeCgroupTree::Read(dir + "/marker"), "returned");
  EXPECT_FALSE(fs::exists(At(absl::StrCat("spare-", kSpareCgroups))));
}

TEST_F(CgroupSparesTest, ASpareGoesRoundTrip) {
  const std::string dir = MakeCgroup("42-0", "round trip");
  ASSERT_TRUE(ReturnSpareCgroup(dir));
  ASSERT_TRUE(ClaimSpareCgroup(parent_, "43-0"));
  EXPECT_EQ(FakeCgroupTree::Read(At("43-0/marker")), "round trip");
}

TEST_F(CgroupSparesTest, SubCgroupsAreSeen) {
  const std::string dir = MakeCgroup("42-0");
  EXPECT_TRUE(HasNoSubCgroups(dir));
  fs::create_directories(dir + "/child");
  EXPECT_FALSE(HasNoSubCgroups(dir));
  EXPECT_FALSE(HasNoSubCgroups(At("missing")));
}

}  // namespace
}  // namespace moat::sandbox::cgroupfs
