// RunCgroup on this machine's real cgroups (needs root): whoever asks first, the main thread or
// the v1 warm-up, the run gets one cgroup with its name, and only one.
#include "sandbox/cgroup/run_cgroup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"

namespace moat::sandbox {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

class RunCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout();
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
  }
  CgroupLayout layout_;
  const CgroupLimits limits_{.memory_bytes = 64 << 20, .pids = 32, .cpus = 1};
};

TEST_F(RunCgroupTest, EitherThreadMakesItAndTheRunGetsThatOne) {
  for (int i = 0; i < 12; ++i) {
    const std::string name = absl::StrCat(::getpid(), "-runcgroup-", i);
    std::vector<std::string> paths;
    {
      absl::StatusOr<std::unique_ptr<RunCgroup>> run = RunCgroup::Start(layout_, name, limits_);
      ASSERT_TRUE(run.ok()) << run.status();
      if (layout_.kind == CgroupLayout::Kind::kV2) {
        ASSERT_NE((*run)->made(), nullptr) << "v2 clones the child into it: made at once";
      }
      // Half the runs ask at once (racing the warm-up), half after it has had time to make it.
      if (i % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      absl::StatusOr<Cgroup*> cgroup = (*run)->Get();
      ASSERT_TRUE(cgroup.ok()) << cgroup.status();
      ASSERT_NE(*cgroup, nullptr);
      EXPECT_EQ((*run)->Get().value_or(nullptr), *cgroup) << "one cgroup per run";
      EXPECT_EQ((*run)->made(), *cgroup);
      paths = (*cgroup)->paths();
      ASSERT_FALSE(paths.empty());
      EXPECT_THAT(paths, Each(HasSubstr(name)));
      for (const std::string& path : paths) EXPECT_TRUE(std::filesystem::is_directory(path));
    }
    // Recycled: gone, or (v1) an empty spare under another name for the next run.
    for (const std::string& path : paths) EXPECT_FALSE(std::filesystem::exists(path)) << path;
  }
}

TEST_F(RunCgroupTest, ACgroupMadeAheadAndNeverTakenIsRemoved) {
  const std::string name = absl::StrCat(::getpid(), "-runcgroup-untaken");
  {
    absl::StatusOr<std::unique_ptr<RunCgroup>> run = RunCgroup::Start(layout_, name, limits_);
    ASSERT_TRUE(run.ok()) << run.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }  // An early error in the run: nobody called Get().
  for (const auto& [controller, mount] : layout_.v1_mounts) {
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(mount, "/moat/", name))) << controller;
  }
}

}  // namespace
}  // namespace moat::sandbox
