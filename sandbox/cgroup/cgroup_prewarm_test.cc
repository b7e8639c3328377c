#include "sandbox/cgroup/cgroup_prewarm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/testing/temp_dir.h"

namespace moat::sandbox {
namespace {

class CgroupPrewarmTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  ScopedTempDir tmp_{"moat-prewarm", "/tmp"};
  const std::string dir_ = tmp_.path();
};

// On v1 the warm-up writes the id of its own thread into the tasks file of the cgroup the
// process is already in (a no-op move), in the first hierarchy moat knows.
TEST_F(CgroupPrewarmTest, WritesItsThreadIntoItsOwnV1Cgroup) {
  ASSERT_EQ(::mkdir((dir_ + "/pids").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir_ + "/pids/session").c_str(), 0755), 0);
  std::string tasks = Write("pids/session/tasks", "");
  std::string self = Write("cgroup",
                           "9:name=systemd:/\n"
                           "8:pids:/session\n"
                           "4:memory:/elsewhere\n"
                           "0::/\n");
  CgroupLayout layout;
  layout.kind = CgroupLayout::Kind::kHybrid;
  layout.v1_mounts = {{"pids", dir_ + "/pids"}};
  {
    std::unique_ptr<CgroupPrewarm> prewarm = CgroupPrewarm::Start(layout, self);
    ASSERT_NE(prewarm, nullptr);
    EXPECT_EQ(prewarm->tasks_file(), tasks);
  }  // joined here
  std::string written = Read(tasks);
  ASSERT_FALSE(written.empty());
  EXPECT_NE(std::stol(written), static_cast<long>(::getpid()));  // a thread of ours, not main
}

TEST_F(CgroupPrewarmTest, RootCgroupPathHasNoExtraSlash) {
  std::string self = Write("cgroup", "3:cpu,cpuacct:/\n");
  CgroupLayout layout;
  layout.kind = CgroupLayout::Kind::kV1;
  layout.v1_mounts = {{"cpuacct", dir_ + "/nowhere"}};
  std::unique_ptr<CgroupPrewarm> prewarm = CgroupPrewarm::Start(layout, self);
  ASSERT_NE(prewarm, nullptr);
  EXPECT_EQ(prewarm->tasks_file(), dir_ + "/nowhere/tasks");  // missing file: best effort, no crash
}

// The follow-up runs on the thread after the warm-up's write (it is what waits behind it), and
// also when the write could not be made; Wait() returns once it has run.
TEST_F(CgroupPrewarmTest, FollowUpRunsAfterTheWarmUpEvenIfItFailed) {
  ASSERT_EQ(::mkdir((dir_ + "/pids").c_str(), 0755), 0);
  std::string tasks = Write("pids/tasks", "");
  std::string self = Write("cgroup", "8:pids:/\n");
  CgroupLayout layout;
  layout.kind = CgroupLayout::Kind::kV1;
  layout.v1_mounts = {{"pids", dir_ + "/pids"}};
  std::string seen_by_follow_up;
  pid_t follow_up_tid = 0;
  std::unique_ptr<CgroupPrewarm> prewarm = CgroupPrewarm::Start(layout, self, [&] {
    seen_by_follow_up = Read(tasks);
    follow_up_tid = ::gettid();
  });
  ASSERT_NE(prewarm, nullptr);
  prewarm->Wait();
  EXPECT_EQ(seen_by_follow_up, std::to_string(follow_up_tid)) << "after the write, same thread";
  EXPECT_NE(follow_up_tid, ::gettid());

  layout.v1_mounts = {{"pids", dir_ + "/nowhere"}};  // the write fails
  bool ran = false;
  prewarm = CgroupPrewarm::Start(layout, self, [&] { ran = true; });
  ASSERT_NE(prewarm, nullptr);
  prewarm->Wait();
  EXPECT_TRUE(ran);
}

TEST_F(CgroupPrewarmTest, NothingToDoOnV2OrWithoutAKnownHierarchy) {
  std::string self = Write("cgroup", "0::/user.slice\n");
  CgroupLayout v2;
  v2.kind = CgroupLayout::Kind::kV2;
  EXPECT_EQ(CgroupPrewarm::Start(v2, self), nullptr);
  CgroupLayout v1;
  v1.kind = CgroupLayout::Kind::kV1;
  v1.v1_mounts = {{"pids", dir_}};
  EXPECT_EQ(CgroupPrewarm::Start(v1, self), nullptr);  // no v1 line in /proc/self/cgroup
}

}  // namespace
}  // namespace moat::sandbox
