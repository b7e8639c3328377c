// SideThread under a pids limit: a test of util/side_thread that needs a real cgroup, so it lives
// in the cgroup layer, above both.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sandbox/cgroup/cgroup.h"
#include "util/side_thread.h"

namespace moat {
namespace {

// With no room for one more thread (a pids limit of 1 on a process that has one), the thread is
// not made and the body never runs: the caller finds out from started() and does without.
TEST(SideThreadTest, WithNoRoomForAThreadTheBodyNeverRuns) {
  if (::geteuid() != 0) GTEST_SKIP() << "a pids cgroup needs root";
  absl::StatusOr<sandbox::CgroupLayout> layout = sandbox::DetectCgroupLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  absl::StatusOr<std::unique_ptr<sandbox::Cgroup>> cgroup = sandbox::Cgroup::Create(
      *layout, absl::StrCat("side-thread-test-", ::getpid()),
      sandbox::CgroupLimits{.memory_bytes = 64 << 20, .pids = 1, .cpus = 1});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(10);
    std::atomic<bool> ran{false};
    {
      SideThread t([&] { ran = true; });
      if (t.started()) ::_exit(11);
      t.Join();
    }
    ::_exit(ran ? 12 : 0);
  }
  ASSERT_TRUE((*cgroup)->AddProcess(child).ok());
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(go[0]);
  ::close(go[1]);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "11: the thread was made anyway; 12: the body ran";
  EXPECT_TRUE((*cgroup)->Destroy().ok());
}

}  // namespace
}  // namespace moat
