#include "util/side_thread.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace moat {
namespace {

cpu_set_t OwnAffinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  return set;
}

// Restores the calling thread's CPU set when the test ends.
class KeepAffinity {
 public:
  KeepAffinity() : saved_(OwnAffinity()) {}
  ~KeepAffinity() { ::sched_setaffinity(0, sizeof(saved_), &saved_); }

 private:
  cpu_set_t saved_;
};

TEST(SideThreadTest, RunsTheBodyOnceAndJoinsOnDestruction) {
  std::atomic<int> runs{0};
  {
    SideThread t([&] { runs.fetch_add(1); });
  }
  EXPECT_EQ(runs.load(), 1);
}

TEST(SideThreadTest, JoinWaitsForTheBodyAndMayBeRepeated) {
  std::atomic<bool> done{false};
  SideThread t([&] {
    struct timespec pause = {0, 20'000'000};
    ::nanosleep(&pause, nullptr);
    done = true;
  });
  t.Join();
  EXPECT_TRUE(done.load());
  t.Join();
}

TEST(SideThreadTest, StartsOnAnotherCpuThanItsCreator) {
  const cpu_set_t all = OwnAffinity();
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one usable CPU";
  for (int i = 0; i < 20; ++i) {
    SideThread t([] {}, Placement::kAwayFromCreator);
    t.Join();
    ASSERT_GE(t.avoided_cpu(), 0);
    EXPECT_NE(t.started_on(), t.avoided_cpu()) << "round " << i;
  }
}

TEST(SideThreadTest, TakesBackTheProcessCpuSetOnceRunning) {
  const cpu_set_t all = OwnAffinity();
  cpu_set_t seen;
  CPU_ZERO(&seen);
  SideThread t([&] { seen = OwnAffinity(); }, Placement::kAwayFromCreator);
  t.Join();
  EXPECT_TRUE(CPU_EQUAL(&seen, &all));
}

TEST(SideThreadTest, AnywhereMeansNoPinning) {
  cpu_set_t seen;
  CPU_ZERO(&seen);
  SideThread t([&] { seen = OwnAffinity(); }, Placement::kAnywhere);
  t.Join();
  EXPECT_EQ(t.avoided_cpu(), -1);
  const cpu_set_t all = OwnAffinity();
  EXPECT_TRUE(CPU_EQUAL(&seen, &all));
}

// The runnable count is the fourth field of /proc/loadavg, before its slash.
TEST(RunnableTasksTest, ReadsTheFourthFieldOfLoadavg) {
  char path[] = "/tmp/side_thread_test.XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  auto write_all = [&](const char* text) {
    ASSERT_EQ(::ftruncate(fd, 0), 0);
    ASSERT_EQ(::pwrite(fd, text, std::strlen(text), 0), static_cast<ssize_t>(std::strlen(text)));
  };
  write_all("0.52 0.58 0.59 3/1024 12345\n");
  EXPECT_EQ(RunnableTasks(path), 3);
  write_all("12.00 8.50 4.25 17/2048 99\n");
  EXPECT_EQ(RunnableTasks(path), 17);
  write_all("0.52 0.58 0.59\n");
  EXPECT_EQ(RunnableTasks(path), -1);
  write_all("0.52 0.58 0.59 x/1024 1\n");
  EXPECT_EQ(RunnableTasks(path), -1);
  ::close(fd);
  ::unlink(path);
  EXPECT_EQ(RunnableTasks("/nonexistent/loadavg"), -1);
  EXPECT_GE(RunnableTasks(), 1) << "this test itself is running";
}

TEST(SideThreadTest, OnOneUsableCpuStartsThereAsAPlainThread) {
  KeepAffinity restore;
  const int cpu = ::sched_getcpu();
  ASSERT_GE(cpu, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
  cpu_set_t seen;
  CPU_ZERO(&seen);
  SideThread t([&] { seen = OwnAffinity(); }, Placement::kAwayFromCreator);
  t.Join();
  EXPECT_EQ(t.avoided_cpu(), -1);
  EXPECT_EQ(t.started_on(), cpu);
  EXPECT_TRUE(CPU_EQUAL(&seen, &one));
}

}  // namespace
}  // namespace moat
