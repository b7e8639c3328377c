// The root tree the supervisor builds for the child (needs root, and Linux 6.15+ to mount onto a
// detached tree; older kernels skip). Everything is checked through the tree's descriptor, as
// root: what a mount makes read-only stays so even for root (EROFS).
#include "sandbox/root_tree.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace moat::sandbox {
namespace {

constexpr uid_t kUid = 65534;
constexpr gid_t kGid = 65534;

class RootTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "building mounts needs root";
    spec_.host_entries = {{HostEntry::Kind::kDirectory, "usr", ""},
                          {HostEntry::Kind::kSymlink, "bin", "usr/bin"},
                          {HostEntry::Kind::kDirectory, "moat-test-vanished", ""}};
    spec_.own_dirs = {"proc", "sys", "dev", "tmp", "run", "workspace"};
    spec_.tmpfs_bytes = 8 << 20;
    spec_.uid = kUid;
    spec_.gid = kGid;
  }
  // Builds the tree; skips on kernels that cannot.
  int Build() {
    absl::StatusOr<UniqueFd> tree = BuildRootTree(spec_);
    if (tree.status().code() == absl::StatusCode::kUnimplemented) return -1;
    EXPECT_TRUE(tree.ok()) << tree.status();
    if (!tree.ok()) return -1;
    tree_ = *std::move(tree);
    return tree_.get();
  }
  // errno of creating `path` (a file) under the tree, 0 if it worked.
  int CreateError(const char* path) {
    int fd = ::openat(tree_.get(), path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    ::close(fd);
    ::unlinkat(tree_.get(), path, 0);
    return 0;
  }
  struct stat Stat(const char* path, int flags = 0) {
    struct stat st = {};
    EXPECT_EQ(::fstatat(tree_.get(), path, &st, flags), 0) << path << ": " << strerror(errno);
    return st;
  }

  RootTreeSpec spec_;
  UniqueFd tree_;
};

TEST_F(RootTreeTest, ShowsTheHostReadOnly) {
  if (Build() < 0) GTEST_SKIP() << "this kernel cannot mount onto a detached tree";
  EXPECT_TRUE(S_ISREG(Stat("usr/bin/sh", 0).st_mode)) << "the host's /usr is bound";
  struct stat bin = Stat("bin", AT_SYMLINK_NOFOLLOW);
  EXPECT_TRUE(S_ISLNK(bin.st_mode));
  char target[64] = {};
  ASSERT_GT(::readlinkat(tree_.get(), "bin", target, sizeof(target) - 1), 0);
  EXPECT_STREQ(target, "usr/bin");
  EXPECT_EQ(bin.st_uid, kUid) << "symlinks belong to the sandbox's root";
  EXPECT_TRUE(S_ISDIR(Stat("moat-test-vanished").st_mode)) << "a vanished entry: a mount point";
  EXPECT_EQ(CreateError("usr/moat-test-file"), EROFS);
  EXPECT_EQ(CreateError("moat-test-file"), EROFS) << "the root itself";
  EXPECT_EQ(CreateError("run/moat-test-file"), EROFS);
  for (const char* own : {"proc", "sys", "tmp", "run", "workspace", "dev"}) {
    EXPECT_TRUE(S_ISDIR(Stat(own).st_mode)) << own;
  }
  struct stat root = Stat(".");
  EXPECT_EQ(root.st_uid, kUid);
  EXPECT_EQ(root.st_mode & 07777, 0755u);
}

TEST_F(RootTreeTest, TmpAndWorkspaceAreWritableTmpfsOfTheSandboxRoot) {
  if (Build() < 0) GTEST_SKIP() << "this kernel cannot mount onto a detached tree";
  struct stat tmp = Stat("tmp");
  EXPECT_EQ(tmp.st_uid, kUid);
  EXPECT_EQ(tmp.st_gid, kGid);
  EXPECT_EQ(tmp.st_mode & 07777, 01777u);
  struct stat workspace = Stat("workspace");
  EXPECT_EQ(workspace.st_uid, kUid);
  EXPECT_EQ(workspace.st_mode & 07777, 0755u);
  EXPECT_EQ(CreateError("tmp/moat-test-file"), 0);
  EXPECT_EQ(CreateError("workspace/moat-test-file"), 0);
  int tmp_fd = ::openat(tree_.get(), "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(tmp_fd, 0);
  struct statvfs vfs;
  ASSERT_EQ(::fstatvfs(tmp_fd, &vfs), 0);
  ::close(tmp_fd);
  EXPECT_EQ(static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize, spec_.tmpfs_bytes);
}

TEST_F(RootTreeTest, WithAWorkspaceDirectoryOnlyTheMountPointIsLeft) {
  spec_.workspace_tmpfs = false;
  if (Build() < 0) GTEST_SKIP() << "this kernel cannot mount onto a detached tree";
  EXPECT_TRUE(S_ISDIR(Stat("workspace").st_mode));
  EXPECT_EQ(CreateError("workspace/moat-test-file"), EROFS) << "the read-only root's directory";
}

TEST_F(RootTreeTest, DevHasTheHarmlessDevicesAndAWritableShm) {
  if (Build() < 0) GTEST_SKIP() << "this kernel cannot mount onto a detached tree";
  for (const char* device : kDevDevices) {
    const std::string path = std::string("dev/") + device;
    EXPECT_TRUE(S_ISCHR(Stat(path.c_str()).st_mode)) << path;
  }
  int null = ::openat(tree_.get(), "dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(null, 0) << "a read-only mount does not stop writing to a device";
  EXPECT_EQ(::write(null, "x", 1), 1);
  ::close(null);
  // But its owner and mode cannot change: the device's own mount is read-only (checked on the
  // mount, never by trying: that would change the host's /dev/null).
  int path = ::openat(tree_.get(), "dev/null", O_PATH | O_CLOEXEC);
  ASSERT_GE(path, 0);
  struct statvfs vfs;
  ASSERT_EQ(::fstatvfs(path, &vfs), 0);
  ::close(path);
  EXPECT_TRUE(vfs.f_flag & ST_RDONLY);
  EXPECT_TRUE(vfs.f_flag & ST_NOSUID);
  EXPECT_EQ(CreateError("dev/moat-test-file"), EROFS);
  EXPECT_EQ(CreateError("dev/shm/moat-test-file"), 0);
  EXPECT_EQ(Stat("dev/shm").st_mode & 07777, 01777u);
  EXPECT_TRUE(S_ISDIR(Stat("dev/pts").st_mode));
  char target[64] = {};
  ASSERT_GT(::readlinkat(tree_.get(), "dev/fd", target, sizeof(target) - 1), 0);
  EXPECT_STREQ(target, "/proc/self/fd");
}

}  // namespace
}  // namespace moat::sandbox
