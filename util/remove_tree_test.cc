#include "util/remove_tree.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "util/testing/temp_dir.h"
#include "util/unique_fd.h"

namespace moat {
namespace {

namespace fs = std::filesystem;

class RemoveTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_.reset(::open(base_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd_.valid());
  }
  void TearDown() override {
    fd_.reset();
    if (!mount_.empty()) ::umount2(mount_.c_str(), MNT_DETACH);
  }

  ScopedTempDir tmp_{"remove_tree_test", "/var/tmp"};
  const std::string base_ = tmp_.path();
  std::string mount_;
  UniqueFd fd_;
};

TEST_F(RemoveTreeTest, RemovesFilesAndReportsMissing) {
  std::ofstream(base_ + "/f") << "x";
  EXPECT_TRUE(RemoveTreeAt(fd_.get(), "f").ok());
  EXPECT_FALSE(fs::exists(base_ + "/f"));
  EXPECT_TRUE(absl::IsNotFound(RemoveTreeAt(fd_.get(), "f")));
}

TEST_F(RemoveTreeTest, RemovesLinksNotTheirTargets) {
  fs::create_directories(base_ + "/target/inner");
  std::ofstream(base_ + "/target/inner/keep") << "k";
  fs::create_directories(base_ + "/tree/x");
  fs::create_directory_symlink(base_ + "/target", base_ + "/tree/x/abs");
  fs::create_directory_symlink("../../target", base_ + "/tree/x/rel");
  EXPECT_TRUE(RemoveTreeAt(fd_.get(), "tree").ok());
  EXPECT_FALSE(fs::exists(base_ + "/tree"));
  EXPECT_TRUE(fs::exists(base_ + "/target/inner/keep"));
}

TEST_F(RemoveTreeTest, RemovesTreesDeeperThanItHoldsOpen) {
  const int depth = kMaxOpenLevels * 5 + 3;
  UniqueFd dir(::dup(fd_.get()));
  for (int i = 0; i < depth; ++i) {
    ASSERT_EQ(::mkdirat(dir.get(), i == 0 ? "deep" : "d", 0755), 0);
    dir.reset(::openat(dir.get(), i == 0 ? "deep" : "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(dir.valid());
  }
  ASSERT_EQ(::symlinkat("/", dir.get(), "root-link"), 0);
  dir.reset();
  absl::Status status = RemoveTreeAt(fd_.get(), "deep");
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(fs::is_empty(base_));
}

TEST_F(RemoveTreeTest, LeavesMountPointsAndWhatIsInThem) {
  fs::create_directories(base_ + "/tree/mnt");
  std::ofstream(base_ + "/tree/other") << "o";
  mount_ = base_ + "/tree/mnt";
  if (::mount("tmpfs", mount_.c_str(), "tmpfs", 0, "size=64k") != 0) {
    mount_.clear();
    GTEST_SKIP() << "mounting a tmpfs needs root: " << std::strerror(errno);
  }
  std::ofstream(mount_ + "/inside") << "i";
  absl::Status status = RemoveTreeAt(fd_.get(), "tree");
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_TRUE(fs::exists(mount_ + "/inside"));
  EXPECT_FALSE(fs::exists(base_ + "/tree/other")) << "the rest was removed";
  ASSERT_EQ(::umount2(mount_.c_str(), 0), 0);
  mount_.clear();
  EXPECT_TRUE(RemoveTreeAt(fd_.get(), "tree").ok());
}

}  // namespace
}  // namespace moat
