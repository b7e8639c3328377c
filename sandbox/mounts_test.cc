#include "sandbox/mounts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace moat::sandbox {
namespace {

using K = MountStep::Kind;
using ::testing::HasSubstr;

std::vector<const MountStep*> Find(const MountPlan& plan, K kind) {
  std::vector<const MountStep*> out;
  for (const MountStep& s : plan.steps()) {
    if (s.kind == kind) out.push_back(&s);
  }
  return out;
}

int IndexOf(const MountPlan& plan, K kind, const std::string& target) {
  for (size_t i = 0; i < plan.steps().size(); ++i) {
    const MountStep& s = plan.steps()[i];
    if (s.kind == kind && s.target && target == s.target) return static_cast<int>(i);
  }
  return -1;
}

TEST(MountPlanTest, StartsPrivateAndEndsWithPivot) {
  absl::StatusOr<MountPlan> plan = MountPlan::Build(MountOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->steps().size(), 3u);
  EXPECT_EQ(plan->steps().front().kind, K::kMakePrivate);
  EXPECT_EQ(plan->steps().back().kind, K::kPivot);
  EXPECT_STREQ(plan->steps().back().source, "/workspace");
}

TEST(MountPlanTest, BindsHostDirectoriesButNotTheOnesItReplaces) {
  absl::StatusOr<MountPlan> plan = MountPlan::Build(MountOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> bound;
  for (const MountStep* s : Find(*plan, K::kBind)) bound.push_back(s->source);
  EXPECT_NE(std::find(bound.begin(), bound.end(), "/etc"), bound.end());
  EXPECT_NE(std::find(bound.begin(), bound.end(), "/usr"), bound.end());
  for (const char* own : {"/proc", "/sys", "/dev", "/tmp", "/run"}) {
    EXPECT_EQ(std::find(bound.begin(), bound.end(), own), bound.end()) << own;
  }
  // The whole tree goes read-only before anything writable is added.
  int ro = IndexOf(*plan, K::kSetReadOnly, "/tmp");
  ASSERT_GE(ro, 0);
  EXPECT_LT(ro, IndexOf(*plan, K::kTmpfs, "/tmp/tmp"));
  EXPECT_LT(ro, IndexOf(*plan, K::kTmpfs, "/tmp/workspace"));
}

TEST(MountPlanTest, RecreatesTopLevelSymlinks) {
  char target[4096];
  ssize_t n = ::readlink("/bin", target, sizeof(target));
  if (n < 0) GTEST_SKIP() << "/bin is not a symlink on this host";
  bool found = false;
  for (const MountStep* s : Find(*MountPlan::Build(MountOptions{}), K::kSymlink)) {
    if (std::string(s->target) == "/tmp/bin") {
      EXPECT_EQ(std::string(s->source), std::string(target, n));
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(MountPlanTest, TmpfsSizesComeFromTheOptions) {
  MountOptions options;
  options.tmpfs_bytes = 12345 * 4096;
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ASSERT_TRUE(plan.ok());
  int tmp = IndexOf(*plan, K::kTmpfs, "/tmp/tmp");
  int ws = IndexOf(*plan, K::kTmpfs, "/tmp/workspace");
  ASSERT_GE(tmp, 0);
  ASSERT_GE(ws, 0);
  EXPECT_THAT(plan->steps()[tmp].data, HasSubstr("size=50565120"));
  EXPECT_THAT(plan->steps()[ws].data, HasSubstr("size=50565120"));
}

TEST(MountPlanTest, PolicyPathsAreOrderedWritableThenReadOnlyThenHidden) {
  MountOptions options;
  options.workspace_dir = "/usr";
  options.writable_paths = {"/var"};
  options.readonly_paths = {"/var/lib"};
  options.hidden_paths = {"/var/lib/secret"};
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int ws = IndexOf(*plan, K::kAttachInRoot, "/workspace");
  int w = IndexOf(*plan, K::kAttachInRoot, "/var");
  int ro = IndexOf(*plan, K::kReadOnlyInRoot, "/var/lib");
  int hide = IndexOf(*plan, K::kHideInRoot, "/var/lib/secret");
  ASSERT_GE(ws, 0);
  EXPECT_EQ(IndexOf(*plan, K::kTmpfs, "/tmp/workspace"), -1);
  EXPECT_LT(ws, w);
  EXPECT_LT(w, ro);
  EXPECT_LT(ro, hide);
  EXPECT_LT(hide, static_cast<int>(plan->steps().size()) - 1);
}

TEST(MountPlanTest, MissingWritablePathIsAnError) {
  MountOptions options;
  options.writable_paths = {"/nonexistent/moat-test"};
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("filesystem.allowWrite: cannot use \"/nonexistent/moat-test\""));
}

TEST(MountPlanTest, WritablePathUnderPrivateTmpGetsAMountPoint) {
  char tmpl[] = "/tmp/moat-mounts-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  MountOptions options;
  options.writable_paths = {tmpl};
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ::rmdir(tmpl);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int mkdir = IndexOf(*plan, K::kMkdir, std::string("/tmp") + tmpl);
  int attach = IndexOf(*plan, K::kAttachInRoot, tmpl);
  ASSERT_GE(mkdir, 0);
  ASSERT_GE(attach, 0);
  EXPECT_LT(IndexOf(*plan, K::kTmpfs, "/tmp/tmp"), mkdir);  // on the sandbox's own /tmp
  EXPECT_LT(mkdir, attach);
  EXPECT_EQ(plan->inherited_fds().size(), 1u);
  EXPECT_GE(plan->steps()[attach].fd, 0);
}

// Rootless: no descriptor from the parent (open_tree there needs root over the host's mounts);
// the child clones each host path itself, before the new root's tmpfs goes over /tmp, where one
// of them lies, and checks it is the file the parent saw.
TEST(MountPlanTest, RootlessPlansCloneHostPathsInTheChildBeforeStaging) {
  char tmpl[] = "/tmp/moat-mounts-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  struct stat st;
  ASSERT_EQ(::stat(tmpl, &st), 0);
  MountOptions options;
  options.open_in_child = true;
  options.workspace_dir = "/usr";
  options.writable_paths = {tmpl};
  options.working_dir = "/etc";
  options.show_working_dir = true;
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ::rmdir(tmpl);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->inherited_fds().empty());
  std::vector<const MountStep*> opens = Find(*plan, K::kOpenTree);
  ASSERT_EQ(opens.size(), 3u);
  const int staging = IndexOf(*plan, K::kTmpfs, "/tmp");
  ASSERT_GE(staging, 0);
  EXPECT_EQ(plan->steps()[0].kind, K::kMakePrivate);
  for (size_t i = 0; i < opens.size(); ++i) {
    EXPECT_EQ(opens[i], &plan->steps()[i + 1]) << "right after the mounts went private";
    EXPECT_EQ(opens[i]->slot, static_cast<int>(i));
  }
  EXPECT_STREQ(opens[0]->source, "/usr");
  EXPECT_STREQ(opens[1]->source, "/etc");
  EXPECT_STREQ(opens[2]->source, tmpl);
  EXPECT_EQ(opens[2]->dev, static_cast<uint64_t>(st.st_dev));
  EXPECT_EQ(opens[2]->ino, static_cast<uint64_t>(st.st_ino));
  const int attach = IndexOf(*plan, K::kAttachInRoot, tmpl);
  ASSERT_GE(attach, 0);
  EXPECT_GT(attach, staging);
  EXPECT_EQ(plan->steps()[attach].slot, 2);
  EXPECT_EQ(plan->steps()[attach].fd, -1);
  const int ws = IndexOf(*plan, K::kAttachInRoot, "/workspace");
  ASSERT_GE(ws, 0);
  EXPECT_EQ(plan->steps()[ws].slot, 0);
}

TEST(MountPlanTest, RootlessPlansStillRefuseSymlinkedHostPaths) {
  char tmpl[] = "/tmp/moat-mounts-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string link = std::string(tmpl) + "/link";
  ASSERT_EQ(::symlink("/etc", link.c_str()), 0);
  MountOptions options;
  options.open_in_child = true;
  options.writable_paths = {link};
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ::unlink(link.c_str());
  ::rmdir(tmpl);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("goes through a symlink"));
}

TEST(MountPlanTest, WritablePathUnderProcIsRefused) {
  MountOptions options;
  options.writable_paths = {"/proc/sys"};
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("is under /proc"));
}

// The /proc masks cover what this kernel has; the entries it lacks (config options) are not
// looked for by the child.
// Each with one bind of a read-only template: the empty /run for directories, /dev/null (made
// earlier, read-only) for files.
TEST(MountPlanTest, MasksTheProcEntriesThatExist) {
  absl::StatusOr<MountPlan> plan = MountPlan::Build(MountOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int dev_null = IndexOf(*plan, K::kBind, "/tmp/dev/null");
  const int dev_read_only = IndexOf(*plan, K::kSetReadOnly, "/tmp/dev");
  ASSERT_GE(dev_null, 0);
  ASSERT_GT(dev_read_only, dev_null);
  for (const char* entry :
       {"/proc/acpi", "/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/scsi",
        "/proc/kcore", "/proc/keys", "/proc/kmsg", "/proc/timer_list", "/proc/sched_debug",
        "/proc/latency_stats", "/proc/sysrq-trigger", "/proc/kallsyms", "/proc/config.gz"}) {
    SCOPED_TRACE(entry);
    struct stat st;
    const bool exists = ::lstat(entry, &st) == 0;
    const int mask = IndexOf(*plan, K::kMask, absl::StrCat("/tmp", entry));
    EXPECT_EQ(mask >= 0, exists);
    if (mask < 0) continue;
    EXPECT_STREQ(plan->steps()[mask].source, S_ISDIR(st.st_mode) ? "/tmp/run" : "/tmp/dev/null");
    EXPECT_GT(mask, dev_read_only) << "its template must be read-only by then";
    EXPECT_GT(mask, IndexOf(*plan, K::kProc, "/tmp/proc"));
  }
  EXPECT_GE(IndexOf(*plan, K::kMask, "/tmp/proc/kmsg"), 0) << "there on every kernel";
}

TEST(MountPlanTest, StringsSurviveAMove) {
  absl::StatusOr<MountPlan> plan = MountPlan::Build(MountOptions{});
  ASSERT_TRUE(plan.ok());
  std::string first_target = plan->steps()[1].target;
  MountPlan moved = std::move(*plan);
  EXPECT_EQ(first_target, moved.steps()[1].target);
}

}  // namespace
}  // namespace moat::sandbox
