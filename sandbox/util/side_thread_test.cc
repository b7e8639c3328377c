#include "sandbox/util/side_thread.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>

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
    SideThread t([] {});
    t.Join();
    ASSERT_GE(t.avoided_cpu(), 0);
    EXPECT_NE(t.started_on(), t.avoided_cpu()) << "round " << i;
  }
}

TEST(SideThreadTest, TakesBackTheProcessCpuSetOnceRunning) {
  const cpu_set_t all = OwnAffinity();
  cpu_set_t seen;
  CPU_ZERO(&seen);
  SideThread t([&] { seen = OwnAffinity(); });
  t.Join();
  EXPECT_TRUE(CPU_EQUAL(&seen, &all));
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
  SideThread t([&] { seen = OwnAffinity(); });
  t.Join();
  EXPECT_EQ(t.avoided_cpu(), -1);
  EXPECT_EQ(t.started_on(), cpu);
  EXPECT_TRUE(CPU_EQUAL(&seen, &one));
}

}  // namespace
}  // namespace moat
