#include "node-agent/backend/namespace_ref.h"

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::agent {
namespace {

using ::testing::Contains;
using ::testing::Not;

// A child in a mount namespace of its own, alive until Kill.
class NamespacedChild {
 public:
  NamespacedChild() {
    int ready[2];
    if (::pipe(ready) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      char ok = ::unshare(CLONE_NEWNS) == 0 ? 'y' : 'n';
      (void)!::write(ready[1], &ok, 1);
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    char ok = 'n';
    (void)!::read(ready[0], &ok, 1);
    ::close(ready[0]);
    unshared_ = ok == 'y';
  }
  ~NamespacedChild() { Kill(); }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  bool unshared() const { return unshared_; }
  ino_t MountNamespaceInode() const {
    struct stat st = {};
    ::stat(("/proc/" + std::to_string(pid_) + "/ns/mnt").c_str(), &st);
    return st.st_ino;
  }

 private:
  pid_t pid_ = -1;
  bool unshared_ = false;
};

class NamespaceRefTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "unshare(CLONE_NEWNS) needs root (CI runs as root)";
  }
};

TEST_F(NamespaceRefTest, FindsTheProcessesStillInTheNamespace) {
  NamespacedChild child;
  ASSERT_TRUE(child.unshared());
  absl::StatusOr<NamespaceRef> ref = NamespaceRef::Of(child.pid(), "mnt");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_THAT(ref->Members(), testing::ElementsAre(child.pid()));
  EXPECT_THAT(ref->Members(), Not(Contains(::getpid())));  // We hold it, we are not in it.
  child.Kill();
  EXPECT_TRUE(ref->Members().empty());
}

// The defect it fixes: after a sandbox's namespace was freed, the next namespace made took its
// inode number and the check reported that new sandbox's init as residue of the old one.
TEST_F(NamespaceRefTest, ANamespaceMadeAfterTheHeldOneEndsIsNotTakenForIt) {
  NamespacedChild gone;
  ASSERT_TRUE(gone.unshared());
  const ino_t gone_inode = gone.MountNamespaceInode();
  absl::StatusOr<NamespaceRef> ref = NamespaceRef::Of(gone.pid(), "mnt");
  ASSERT_TRUE(ref.ok()) << ref.status();
  gone.Kill();
  NamespacedChild next;  // What nsfs would number `gone_inode` if the old one were freed.
  ASSERT_TRUE(next.unshared());
  EXPECT_NE(next.MountNamespaceInode(), gone_inode);
  EXPECT_THAT(ref->Members(), Not(Contains(next.pid())));
  EXPECT_TRUE(ref->Members().empty());
}

TEST_F(NamespaceRefTest, ReleasedOrEmptyHoldsNothing) {
  EXPECT_TRUE(NamespaceRef().Members().empty());
  NamespacedChild child;
  ASSERT_TRUE(child.unshared());
  absl::StatusOr<NamespaceRef> ref = NamespaceRef::Of(child.pid(), "mnt");
  ASSERT_TRUE(ref.ok());
  ref->Release();
  EXPECT_FALSE(ref->held());
  EXPECT_TRUE(ref->Members().empty());
  EXPECT_EQ(NamespaceRef::Of(999999999, "mnt").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace moat::agent
