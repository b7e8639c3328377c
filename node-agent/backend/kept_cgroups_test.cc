// RemoveUnusedKeptCgroups on this machine's real cgroups (needs root, as cgroup_root_test): the
// keep-* cgroups nothing names go, the rest stay. Only this test's own cgroups are ever judged
// unused (`in_use` says every other id is), so it never touches what other agents keep.
#include "node-agent/backend/kept_cgroups.h"

#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/cgroup/cgroup.h"

namespace moat::agent {
namespace {

using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

class KeptCgroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    absl::StatusOr<sandbox::CgroupLayout> layout = sandbox::DetectCgroupLayout();
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    for (const auto& [controller, mount] : layout_.v1_mounts) parents_.insert(mount + "/moat");
    if (!layout_.v2_mount.empty()) {
      parents_.insert((layout_.v2_parent.empty() ? layout_.v2_mount : layout_.v2_parent) + "/moat");
    }
    prefix_ = absl::StrCat("sb-keptcgtest-", ::getpid(), "-");
  }

  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
    for (const std::string& dir : made_) ::rmdir(dir.c_str());
  }

  // keep-<prefix><what> in every hierarchy; returns its directories.
  std::vector<std::string> Make(const std::string& what) {
    std::vector<std::string> dirs;
    for (const std::string& parent : parents_) {
      std::filesystem::create_directories(parent);
      const std::string dir = absl::StrCat(parent, "/keep-", prefix_, what);
      EXPECT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
      made_.push_back(dir);
      dirs.push_back(dir);
    }
    return dirs;
  }

  // Ours: used only when listed; any other id is someone else's and counts as used.
  std::function<bool(absl::string_view)> InUse(std::set<std::string> used) {
    return [this, used](absl::string_view id) {
      return !absl::StartsWith(id, prefix_) || used.contains(std::string(id));
    };
  }

  sandbox::CgroupLayout layout_;
  std::set<std::string> parents_;
  std::string prefix_;
  std::vector<std::string> made_;
  pid_t child_ = -1;
};

TEST_F(KeptCgroupsTest, RemovesOnlyOldEmptyUnnamedKeptCgroups) {
  std::vector<std::string> unused = Make("unused");
  Make("recorded");
  std::vector<std::string> busy = Make("busy");
  // A process in one hierarchy's copy of "busy": the sandbox is alive.
  child_ = ::fork();
  if (child_ == 0) {
    ::pause();
    _exit(0);
  }
  ASSERT_GT(child_, 0);
  std::ofstream(busy.front() + "/cgroup.procs") << child_ << "\n";
  const auto in_use = InUse({prefix_ + "recorded"});

  // Just made: another agent may be about to put its sandbox's first process in.
  absl::StatusOr<std::vector<std::string>> young = RemoveUnusedKeptCgroups(layout_, in_use);
  ASSERT_TRUE(young.ok()) << young.status();
  EXPECT_THAT(*young, IsEmpty());

  // Once they are old enough, only the empty one nothing names goes, in every hierarchy.
  const absl::Time later = absl::Now() + kKeptCgroupMinAge + absl::Seconds(1);
  absl::StatusOr<std::vector<std::string>> removed =
      RemoveUnusedKeptCgroups(layout_, in_use, kKeptCgroupMinAge, later);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, UnorderedElementsAreArray(unused));
  for (const std::string& dir : unused) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  for (const std::string& dir : made_) {
    if (absl::StrContains(dir, "unused")) continue;
    EXPECT_TRUE(std::filesystem::exists(dir)) << dir;
  }

  // The busy one goes once its process has left, and nothing else is touched.
  ::kill(child_, SIGKILL);
  ::waitpid(child_, nullptr, 0);
  child_ = -1;
  removed = RemoveUnusedKeptCgroups(layout_, in_use, kKeptCgroupMinAge, later);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, UnorderedElementsAreArray(busy));
  for (const std::string& dir : made_) {
    EXPECT_EQ(std::filesystem::exists(dir), absl::StrContains(dir, "recorded")) << dir;
  }
}

TEST_F(KeptCgroupsTest, NamesMoatNeverMakesAreLeftAlone) {
  std::vector<std::string> dirs;
  for (const std::string& parent : parents_) {
    std::filesystem::create_directories(parent);
    // Not a sandbox id after "keep-" (upper case), and not a kept sandbox's name at all.
    for (const std::string& name : {absl::StrCat("keep-", prefix_, "X"), prefix_ + "plain"}) {
      const std::string dir = absl::StrCat(parent, "/", name);
      ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
      made_.push_back(dir);
    }
  }
  absl::StatusOr<std::vector<std::string>> removed =
      RemoveUnusedKeptCgroups(layout_, InUse({}), kKeptCgroupMinAge, absl::Now() + absl::Hours(1));
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, IsEmpty());
  for (const std::string& dir : made_) EXPECT_TRUE(std::filesystem::exists(dir)) << dir;
}

}  // namespace
}  // namespace moat::agent
