#include "sandbox/mounts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

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

TEST(MountPlanTest, WritablePathUnderProcIsRefused) {
  MountOptions options;
  options.writable_paths = {"/proc/sys"};
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("is under /proc"));
}

// Asked to (prebuild_root) and with the sandbox's ids, the supervisor builds the root itself
// (root_tree.h) and the child attaches it: no host binds, no tmpfs, no /dev steps left.
TEST(MountPlanTest, RootBuiltAheadLeavesTheChildTheRest) {
  if (::geteuid() != 0) GTEST_SKIP() << "building mounts needs root";
  MountOptions options;
  options.sandbox_ids = std::make_pair(65534, 65534);
  options.hidden_paths = {"/var/tmp"};
  options.prebuild_root = true;
  absl::StatusOr<MountPlan> plan = MountPlan::Build(options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (!plan->root_prebuilt()) GTEST_SKIP() << "this kernel cannot mount onto a detached tree";
  std::vector<const MountStep*> attach = Find(*plan, K::kAttachRoot);
  ASSERT_EQ(attach.size(), 1u);
  EXPECT_EQ(plan->steps()[1].kind, K::kAttachRoot) << "right after making mounts private";
  EXPECT_STREQ(attach[0]->target, "/tmp");
  EXPECT_THAT(plan->inherited_fds(), ::testing::ElementsAre(attach[0]->fd));
  EXPECT_TRUE(Find(*plan, K::kTmpfs).empty());
  EXPECT_TRUE(Find(*plan, K::kSymlink).empty());
  for (const MountStep* bind : Find(*plan, K::kBind)) {
    EXPECT_STREQ(bind->source, "/tmp/proc/sys") << "only /proc/sys is bound by the child";
  }
  EXPECT_GE(IndexOf(*plan, K::kDevpts, "/tmp/dev/pts"), 0);
  EXPECT_GE(IndexOf(*plan, K::kProc, "/tmp/proc"), 0);
  EXPECT_LT(IndexOf(*plan, K::kProc, "/tmp/proc"), IndexOf(*plan, K::kHideInRoot, "/var/tmp"));
  EXPECT_EQ(plan->steps().back().kind, K::kPivot);

  options.prebuild_root = false;  // the default, and what kernels before 6.15 get
  absl::StatusOr<MountPlan> child_built = MountPlan::Build(options);
  ASSERT_TRUE(child_built.ok()) << child_built.status();
  EXPECT_FALSE(child_built->root_prebuilt());
  EXPECT_TRUE(Find(*child_built, K::kAttachRoot).empty());
  EXPECT_GE(IndexOf(*child_built, K::kTmpfs, "/tmp/tmp"), 0);
}

// The /proc masks cover what this kernel has; the entries it lacks (config options) are not
// looked for by the child.
TEST(MountPlanTest, MasksTheProcEntriesThatExist) {
  absl::StatusOr<MountPlan> plan = MountPlan::Build(MountOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const char* entry :
       {"/proc/acpi", "/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/scsi",
        "/proc/kcore", "/proc/keys", "/proc/kmsg", "/proc/timer_list", "/proc/sched_debug",
        "/proc/latency_stats", "/proc/sysrq-trigger", "/proc/kallsyms", "/proc/config.gz"}) {
    const bool exists = ::access(entry, F_OK) == 0;
    EXPECT_EQ(IndexOf(*plan, K::kHideInRoot, entry) >= 0, exists) << entry;
  }
  EXPECT_GE(IndexOf(*plan, K::kHideInRoot, "/proc/kmsg"), 0) << "there on every kernel";
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
