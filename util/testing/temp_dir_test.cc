#include "util/testing/temp_dir.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace moat {
namespace {

namespace fs = std::filesystem;

TEST(ScopedTempDirTest, MakesAPrivateDirectoryAndRemovesItWithItsContents) {
  ScopedTempDir outside("outside", "/var/tmp");
  std::ofstream(outside.File("keep")) << "k";
  std::string path;
  {
    ScopedTempDir dir("scoped_temp_dir_test", "/var/tmp/");
    path = dir.path();
    EXPECT_EQ(path.rfind("/var/tmp/scoped_temp_dir_test.", 0), 0u) << path;
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    fs::create_directories(dir.File("a/b"));
    std::ofstream(dir.File("a/b/f")) << "x";
    fs::create_directory_symlink(outside.path(), dir.File("a/link"));
  }
  EXPECT_FALSE(fs::exists(path));
  // A link inside is removed, not followed.
  EXPECT_TRUE(fs::exists(outside.File("keep")));
}

TEST(ScopedTempDirTest, NoDirectoryIsAFatalFailure) {
  EXPECT_FATAL_FAILURE({ ScopedTempDir dir("x", "/nonexistent-moat-parent"); },
                       "cannot make a temporary directory \"/nonexistent-moat-parent/x.");
}

TEST(ScopedTempDirTest, WhatCannotBeRemovedFailsTheTest) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  EXPECT_NONFATAL_FAILURE(
      {
        // Made first, so gone last: after the failed removal, it unmounts and removes the rest.
        struct Cleanup {
          std::string dir;
          ~Cleanup() {
            ::umount2((dir + "/mnt").c_str(), MNT_DETACH);
            std::error_code ignored;
            fs::remove_all(dir, ignored);
          }
        } cleanup;
        ScopedTempDir dir("scoped_temp_dir_test", "/var/tmp");
        cleanup.dir = dir.path();
        ASSERT_EQ(::mkdir(dir.File("mnt").c_str(), 0700), 0);
        ASSERT_EQ(::mount("none", dir.File("mnt").c_str(), "tmpfs", 0, nullptr), 0);
      },
      "the test left");
}

}  // namespace
}  // namespace moat
