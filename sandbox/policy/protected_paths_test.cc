#include "sandbox/policy/protected_paths.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "util/testing/temp_dir.h"

namespace moat::sandbox {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class CreationProtectionTest : public ::testing::Test {
 protected:
  ScopedTempDir tmp_{"moat-protected", "/tmp"};
  const std::string root_ = tmp_.path();
};

TEST_F(CreationProtectionTest, EachStepBelowTheRootAsFarAsParentsExist) {
  ASSERT_EQ(::mkdir((root_ + "/.git").c_str(), 0755), 0);
  std::vector<ProtectedName> names =
      CreationProtection({root_ + "/.git/hooks", root_ + "/.git/config", root_ + "/.pi"}, {root_});
  EXPECT_THAT(names,
              ElementsAre(ProtectedName{root_, ".git"}, ProtectedName{root_ + "/.git", "hooks"},
                          ProtectedName{root_ + "/.git", "config"}, ProtectedName{root_, ".pi"}));
}

TEST_F(CreationProtectionTest, StopsAtTheFirstMissingDirectory) {
  // No .git: refusing ".git" in the root is enough, nothing can be made below it.
  std::vector<ProtectedName> names = CreationProtection({root_ + "/.git/hooks"}, {root_});
  EXPECT_THAT(names, ElementsAre(ProtectedName{root_, ".git"}));
}

TEST_F(CreationProtectionTest, APlantedSymlinkIsNotADirectoryToDescendInto) {
  ASSERT_EQ(::symlink("/etc", (root_ + "/.git").c_str()), 0);
  std::vector<ProtectedName> names = CreationProtection({root_ + "/.git/config"}, {root_});
  EXPECT_THAT(names, ElementsAre(ProtectedName{root_, ".git"}));
}

TEST_F(CreationProtectionTest, PathsOutsideWritableRootsNeedNothing) {
  EXPECT_THAT(CreationProtection({"/etc/passwd", root_}, {root_ + "/sub"}), IsEmpty());
  // The root itself is bound (or not) as a whole.
  EXPECT_THAT(CreationProtection({root_}, {root_}), IsEmpty());
}

TEST_F(CreationProtectionTest, TheDeepestRootIsTheOneThatCounts) {
  ASSERT_EQ(::mkdir((root_ + "/project").c_str(), 0755), 0);
  std::vector<ProtectedName> names =
      CreationProtection({root_ + "/project/.envrc"}, {root_, root_ + "/project"});
  EXPECT_THAT(names, ElementsAre(ProtectedName{root_ + "/project", ".envrc"}));
}

TEST_F(CreationProtectionTest, IdentifiesDirectoriesByDeviceAndInode) {
  struct stat st;
  ASSERT_EQ(::stat(root_.c_str(), &st), 0);
  std::vector<ProtectedEntry> entries =
      IdentifyProtected({{root_, ".envrc"}, {root_ + "/missing", "x"}});
  ASSERT_EQ(entries.size(), 1u);  // a directory that is not there protects nothing
  EXPECT_EQ(entries[0].dev, st.st_dev);
  EXPECT_EQ(entries[0].ino, st.st_ino);
  EXPECT_EQ(entries[0].name, ".envrc");
  EXPECT_EQ(entries[0].path, root_ + "/.envrc");
}

TEST(ProtectedListTest, HoldsWhatTheEscapeReportNamed) {
  std::vector<std::string> each(ProtectedUnderEachRoot().begin(), ProtectedUnderEachRoot().end());
  for (const char* name :
       {".git/hooks", ".git/config", ".pi", ".moat", ".agents", ".claude", ".vscode", ".envrc"}) {
    EXPECT_THAT(each, ::testing::Contains(name));
  }
}

}  // namespace
}  // namespace moat::sandbox
