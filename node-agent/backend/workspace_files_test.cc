#include "node-agent/backend/workspace_files.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/testing/temp_dir.h"
#include "util/unique_fd.h"

namespace moat::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

constexpr uid_t kUid = 4242;
constexpr gid_t kGid = 4343;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void Put(const std::string& path, const std::string& data) { std::ofstream(path) << data; }

// A workspace at <base>/ws, with a "host" directory beside it holding a secret: what an escape
// from the workspace would reach.
class WorkspaceFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ws_ = base_ + "/ws";
    fs::create_directory(ws_);
    fs::create_directory(base_ + "/host");
    Put(base_ + "/host/secret", "host secret");
    root_.reset(::open(ws_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_.valid());
    files_ = std::make_unique<WorkspaceFiles>(root_.get(), kUid, kGid);
  }
  void TearDown() override {
    files_.reset();
    root_.reset();
    if (!mount_.empty()) ::umount2(mount_.c_str(), MNT_DETACH);
  }

  ScopedTempDir tmp_{"workspace_files_test", "/var/tmp"};
  const std::string base_ = tmp_.path();
  std::string ws_, mount_;
  UniqueFd root_;
  std::unique_ptr<WorkspaceFiles> files_;
};

TEST_F(WorkspaceFilesTest, WriteReadStatRoundTrip) {
  ASSERT_TRUE(files_->WriteFile("/workspace/a/b/c.txt", "hello", 0640).ok());
  EXPECT_EQ(Slurp(ws_ + "/a/b/c.txt"), "hello");
  auto read = files_->ReadFile("a/b/c.txt", 0, 100);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "hello");
  auto info = files_->Stat("/workspace/a/b/c.txt");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->path, "/workspace/a/b/c.txt");
  EXPECT_FALSE(info->is_dir);
  EXPECT_EQ(info->size, 5u);
  EXPECT_EQ(info->mode, 0640u);
  auto dir = files_->Stat("/workspace/a");
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(dir->is_dir);
  auto root = files_->Stat("/workspace");
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->is_dir);
  EXPECT_EQ(root->path, "/workspace");

  // Replacing leaves exactly one entry: no temporary file behind.
  ASSERT_TRUE(files_->WriteFile("a/b/c.txt", "bye", 0600).ok());
  EXPECT_EQ(*files_->ReadFile("a/b/c.txt", 0, 100), "bye");
  EXPECT_EQ(files_->Stat("a/b/c.txt")->mode, 0600u);
  auto list = files_->List("a/b");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].path, "/workspace/a/b/c.txt");
}

TEST_F(WorkspaceFilesTest, RangeReads) {
  ASSERT_TRUE(files_->WriteFile("r", "0123456789", 0644).ok());
  EXPECT_EQ(*files_->ReadFile("r", 2, 3), "234");
  EXPECT_EQ(*files_->ReadFile("r", 8, 100), "89");
  EXPECT_EQ(*files_->ReadFile("r", 10, 5), "");
  EXPECT_EQ(*files_->ReadFile("r", 1000, 5), "");
  EXPECT_EQ(*files_->ReadFile("r", 0, 0), "");
}

TEST_F(WorkspaceFilesTest, CreatedEntriesBelongToTheOwnerWithExactModes) {
  fs::create_directory(ws_ + "/pre");
  mode_t old_umask = ::umask(077);
  ASSERT_TRUE(files_->WriteFile("pre/x/f", "data", 04755).ok());
  ASSERT_TRUE(files_->MakeDirectory("d1/d2").ok());
  ::umask(old_umask);
  for (const char* made : {"/pre/x", "/pre/x/f", "/d1", "/d1/d2"}) {
    struct stat st;
    ASSERT_EQ(::lstat((ws_ + made).c_str(), &st), 0) << made;
    EXPECT_EQ(st.st_uid, kUid) << made;
    EXPECT_EQ(st.st_gid, kGid) << made;
    EXPECT_EQ(st.st_mode & 07777, 0755u) << made;  // despite umask 077; no set-id bit
  }
  struct stat pre;
  ASSERT_EQ(::stat((ws_ + "/pre").c_str(), &pre), 0);
  EXPECT_EQ(pre.st_uid, ::getuid()) << "an existing directory is not chowned";
}

TEST_F(WorkspaceFilesTest, RefusesPathsOutsideTheWorkspace) {
  for (const std::string& bad :
       std::vector<std::string>{"../x", "/etc/passwd", "a/../../x", std::string("a\0b", 3)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(files_->ReadFile(bad, 0, 10).status())) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(files_->WriteFile(bad, "x", 0644))) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(files_->Stat(bad).status())) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(files_->List(bad).status())) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(files_->MakeDirectory(bad))) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(files_->Move(bad, "y"))) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(files_->Remove(bad))) << bad;
  }
  EXPECT_FALSE(fs::exists(base_ + "/x"));
}

TEST_F(WorkspaceFilesTest, AbsoluteSymlinkResolvesInsideTheWorkspace) {
  fs::create_symlink("/etc", ws_ + "/evil");
  EXPECT_TRUE(absl::IsNotFound(files_->ReadFile("evil/passwd", 0, 4096).status()));
  // The same link, once the workspace has an /etc/passwd of its own, reads that one.
  fs::create_directory(ws_ + "/etc");
  Put(ws_ + "/etc/passwd", "inside");
  EXPECT_EQ(*files_->ReadFile("evil/passwd", 0, 4096), "inside");
}

TEST_F(WorkspaceFilesTest, RelativeSymlinksCannotClimbOut) {
  fs::create_symlink("../../..", ws_ + "/up");
  EXPECT_TRUE(absl::IsNotFound(files_->ReadFile("up/etc/passwd", 0, 4096).status()));
  fs::create_symlink("../host", ws_ + "/sibling");  // <base>/host/secret exists on the host
  EXPECT_TRUE(absl::IsNotFound(files_->ReadFile("sibling/secret", 0, 4096).status()));
  fs::create_symlink("../host/secret", ws_ + "/direct");
  EXPECT_TRUE(absl::IsNotFound(files_->ReadFile("direct", 0, 4096).status()));
  EXPECT_TRUE(absl::IsNotFound(files_->List("sibling").status()));
}

TEST_F(WorkspaceFilesTest, FifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((ws_ + "/pipe").c_str(), 0644), 0);
  auto read = std::async(std::launch::async, [&] { return files_->ReadFile("pipe", 0, 10); });
  if (read.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Blocked in open: become the writer so the test can end, and fail.
    UniqueFd writer(::open((ws_ + "/pipe").c_str(), O_WRONLY | O_NONBLOCK));
    read.wait();
    FAIL() << "ReadFile blocked on a FIFO";
  }
  EXPECT_TRUE(absl::IsFailedPrecondition(read.get().status()));
}

TEST_F(WorkspaceFilesTest, WriteThroughSymlinkedParentStaysInside) {
  fs::create_directory(ws_ + "/host");
  fs::create_symlink("../host", ws_ + "/out");
  ASSERT_TRUE(files_->WriteFile("out/new.txt", "x", 0644).ok());
  EXPECT_EQ(Slurp(ws_ + "/host/new.txt"), "x");
  EXPECT_FALSE(fs::exists(base_ + "/host/new.txt"));

  // An absolute link to the real host directory resolves to <ws>/<that path>, which is missing.
  fs::create_symlink(base_ + "/host", ws_ + "/abs");
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->WriteFile("abs/new2.txt", "x", 0644)));
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->MakeDirectory("abs/sub")));
  EXPECT_FALSE(fs::exists(base_ + "/host/new2.txt"));
  EXPECT_FALSE(fs::exists(base_ + "/host/sub"));
}

TEST_F(WorkspaceFilesTest, ListReportsSymlinksThemselvesAndStatFollowsThemInside) {
  fs::create_symlink("/etc", ws_ + "/link");
  Put(ws_ + "/b", "bb");
  Put(ws_ + "/a", "a");
  fs::create_directory(ws_ + "/c");
  // Stat follows, inside the workspace: "/etc" there does not exist (the host's is not seen),
  // so the link leads nowhere and is described itself.
  auto dangling = files_->Stat("link");
  ASSERT_TRUE(dangling.ok()) << dangling.status();
  EXPECT_EQ(dangling->type, FileType::kSymlink);
  EXPECT_EQ(dangling->size, 4u);  // "/etc"
  fs::create_symlink("b", ws_ + "/to-b");
  auto to_b = files_->Stat("to-b");
  ASSERT_TRUE(to_b.ok()) << to_b.status();
  EXPECT_EQ(to_b->size, 2u);  // the target's, as ReadFile would read
  EXPECT_EQ(to_b->path, "/workspace/to-b");
  fs::remove(ws_ + "/to-b");
  auto list = files_->List("/workspace");
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<std::string> paths;
  for (const FileInfo& info : *list) paths.push_back(info.path);
  EXPECT_THAT(paths,
              ElementsAre("/workspace/a", "/workspace/b", "/workspace/c", "/workspace/link"));
  EXPECT_EQ((*list)[1].size, 2u);
  EXPECT_TRUE((*list)[2].is_dir);
  EXPECT_EQ((*list)[2].type, FileType::kDirectory);
  EXPECT_FALSE((*list)[3].is_dir);
  EXPECT_EQ((*list)[3].type, FileType::kSymlink);
  EXPECT_EQ((*list)[0].type, FileType::kFile);
}

TEST_F(WorkspaceFilesTest, SetModeChangesTheBitsOfWhatThePathLeadsTo) {
  ASSERT_TRUE(files_->WriteFile("x", "x", 0644).ok());
  fs::create_symlink("x", ws_ + "/to-x");
  ASSERT_TRUE(files_->SetMode("to-x", 04700).ok());  // set-id bits are dropped
  struct stat st;
  ASSERT_EQ(::stat((ws_ + "/x").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  // A link out of the workspace resolves inside it: the host file keeps its mode.
  fs::create_symlink(base_ + "/host/secret", ws_ + "/out");
  EXPECT_TRUE(absl::IsNotFound(files_->SetMode("out", 0777)));
  ASSERT_EQ(::stat((base_ + "/host/secret").c_str(), &st), 0);
  EXPECT_NE(st.st_mode & 0777, 0777u);
}

TEST_F(WorkspaceFilesTest, ADanglingSymlinkCanBeInspectedAndRemoved) {
  fs::create_symlink("missing", ws_ + "/dangling");
  fs::create_symlink("../../outside", ws_ + "/climbing");
  for (const char* name : {"dangling", "climbing"}) {
    SCOPED_TRACE(name);
    auto info = files_->Stat(name);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->type, FileType::kSymlink);
    EXPECT_FALSE(info->is_dir);
    EXPECT_TRUE(absl::IsNotFound(files_->ReadFile(name, 0, 10).status()));
    ASSERT_TRUE(files_->Remove(name).ok());
    EXPECT_FALSE(fs::exists(fs::symlink_status(ws_ + "/" + name)));
    EXPECT_TRUE(absl::IsNotFound(files_->Stat(name).status()));
  }
  EXPECT_TRUE(absl::IsNotFound(files_->Stat("never-was").status()));
}

TEST_F(WorkspaceFilesTest, SpecialFilesAreDescribedAsOtherAndNeverOpened) {
  ASSERT_EQ(::mkfifo((ws_ + "/pipe").c_str(), 0644), 0);
  auto info = files_->Stat("pipe");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->type, FileType::kOther);
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->OpenRead("pipe").status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->OpenRead("").status()));  // the root directory
}

// A download reads through one descriptor: a file replaced meanwhile (upload = write a temporary
// file, rename it over) leaves what was opened intact.
TEST_F(WorkspaceFilesTest, AnOpenedFileKeepsReadingWhatWasOpened) {
  ASSERT_TRUE(files_->WriteFile("f", std::string(10000, 'a'), 0644).ok());
  auto opened = files_->OpenRead("f");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->info.size, 10000u);
  EXPECT_EQ(*ReadAt(opened->fd.get(), 0, 5000), std::string(5000, 'a'));
  ASSERT_TRUE(files_->WriteFile("f", std::string(10000, 'b'), 0644).ok());
  EXPECT_EQ(*ReadAt(opened->fd.get(), 5000, 10000), std::string(5000, 'a'));
  EXPECT_EQ(*files_->ReadFile("f", 0, 3), "bbb");
}

TEST_F(WorkspaceFilesTest, DirectoryVersusFileErrors) {
  ASSERT_TRUE(files_->WriteFile("f", "x", 0644).ok());
  ASSERT_TRUE(files_->MakeDirectory("d").ok());
  EXPECT_TRUE(files_->MakeDirectory("d").ok()) << "an existing directory is fine";
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->List("f").status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->ReadFile("d", 0, 10).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->WriteFile("d", "x", 0644)));
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->WriteFile("/workspace", "x", 0644)));
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->MakeDirectory("f")));
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->MakeDirectory("f/x")));
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->WriteFile("f/x", "x", 0644)));
  EXPECT_TRUE(absl::IsNotFound(files_->ReadFile("missing", 0, 10).status()));
  EXPECT_TRUE(absl::IsNotFound(files_->Stat("missing").status()));
  EXPECT_TRUE(absl::IsNotFound(files_->List("missing").status()));
  EXPECT_TRUE(absl::IsNotFound(files_->Remove("missing")));
  EXPECT_TRUE(absl::IsNotFound(files_->Move("missing", "y")));
}

TEST_F(WorkspaceFilesTest, Move) {
  ASSERT_TRUE(files_->WriteFile("a.txt", "A", 0644).ok());
  ASSERT_TRUE(files_->WriteFile("b.txt", "B", 0644).ok());
  ASSERT_TRUE(files_->MakeDirectory("dir/sub").ok());
  ASSERT_TRUE(files_->Move("a.txt", "dir/a2.txt").ok());
  EXPECT_EQ(Slurp(ws_ + "/dir/a2.txt"), "A");
  EXPECT_FALSE(fs::exists(ws_ + "/a.txt"));
  ASSERT_TRUE(files_->Move("/workspace/b.txt", "dir/a2.txt").ok()) << "replaces a file";
  EXPECT_EQ(Slurp(ws_ + "/dir/a2.txt"), "B");
  EXPECT_TRUE(absl::IsFailedPrecondition(files_->Move("dir/a2.txt", "dir/sub")));
  EXPECT_TRUE(absl::IsInvalidArgument(files_->Move("dir", "dir/sub/dir")));
  EXPECT_TRUE(absl::IsInvalidArgument(files_->Move("/workspace", "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(files_->Move("dir", "/workspace")));
  // Into itself through a symlink the lexical check cannot see: the kernel refuses.
  fs::create_symlink("/dir/sub", ws_ + "/alias");
  EXPECT_TRUE(absl::IsInvalidArgument(files_->Move("dir", "alias/moved")));
  ASSERT_TRUE(files_->Move("dir", "renamed").ok());
  EXPECT_TRUE(fs::is_directory(ws_ + "/renamed/sub"));
}

TEST_F(WorkspaceFilesTest, RemoveNeverFollowsSymlinks) {
  fs::create_directories(ws_ + "/tree/a/b");
  Put(ws_ + "/tree/a/b/file", "x");
  fs::create_symlink(base_ + "/host", ws_ + "/tree/a/b/abs");
  fs::create_symlink("../../../../host", ws_ + "/tree/a/rel");
  ASSERT_TRUE(files_->Remove("tree").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(ws_ + "/tree")));
  EXPECT_EQ(Slurp(base_ + "/host/secret"), "host secret");

  fs::create_directory(ws_ + "/d");
  Put(ws_ + "/d/keep", "k");
  fs::create_symlink("d", ws_ + "/ldir");
  ASSERT_TRUE(files_->Remove("ldir").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(ws_ + "/ldir")));
  EXPECT_EQ(Slurp(ws_ + "/d/keep"), "k");

  ASSERT_TRUE(files_->Remove("/workspace/d/keep").ok());
  EXPECT_FALSE(fs::exists(ws_ + "/d/keep"));
  EXPECT_TRUE(absl::IsInvalidArgument(files_->Remove("/workspace")));
  EXPECT_TRUE(fs::exists(ws_ + "/d"));
}

TEST_F(WorkspaceFilesTest, RemovesDeepTrees) {
  constexpr int kDepth = 1000;  // far deeper than RemoveTreeAt holds open at once
  UniqueFd dir(::open(ws_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (int i = 0; i < kDepth; ++i) {
    const char* name = i == 0 ? "deep" : "d";
    ASSERT_EQ(::mkdirat(dir.get(), name, 0755), 0);
    dir.reset(::openat(dir.get(), name, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(dir.valid());
  }
  ASSERT_EQ(::mknodat(dir.get(), "leaf", S_IFREG | 0644, 0), 0);
  dir.reset();
  auto status = files_->Remove("deep");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_FALSE(fs::exists(ws_ + "/deep"));
  EXPECT_TRUE(files_->List("")->empty()) << "nothing moved up was left behind";
}

TEST_F(WorkspaceFilesTest, FullWorkspaceIsResourceExhausted) {
  std::string small = base_ + "/small";
  fs::create_directory(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k") != 0) {
    GTEST_SKIP() << "mounting a tmpfs needs root: " << std::strerror(errno);
  }
  mount_ = small;
  UniqueFd root(::open(small.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root.valid());
  WorkspaceFiles files(root.get(), kUid, kGid);
  absl::Status status = files.WriteFile("big", std::string(1 << 20, 'x'), 0644);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  auto list = files.List("");
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty()) << "the temporary file was removed";
  EXPECT_TRUE(files.WriteFile("small", "fits", 0644).ok());
  root.reset();
  ASSERT_EQ(::umount2(small.c_str(), 0), 0);
  mount_.clear();
}

}  // namespace
}  // namespace moat::agent
