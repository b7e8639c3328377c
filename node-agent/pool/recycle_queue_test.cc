#include "node-agent/pool/recycle_queue.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace moat::agent {
namespace {

TEST(RecycleQueueTest, RecyclesEachIdOnceInOrderAtTheRate) {
  absl::Mutex mu;
  std::vector<std::string> done;
  RecycleQueue queue(/*per_second=*/20, [&](const std::string& id) {
    absl::MutexLock lock(&mu);
    done.push_back(id);
  });
  absl::Time start = absl::Now();
  for (const char* id : {"sb-1", "sb-2", "sb-2", "sb-3", "sb-4", "sb-5"}) queue.Enqueue(id);
  EXPECT_GE(queue.backlog(), 1);
  ASSERT_TRUE(queue.WaitEmpty(absl::Seconds(10)));
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(queue.backlog(), 0);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(done, (std::vector<std::string>{"sb-1", "sb-2", "sb-3", "sb-4", "sb-5"}));
  // Five at 20 per second: the first at once, four more 50 ms apart.
  EXPECT_GE(took, absl::Milliseconds(190));
}

TEST(RecycleQueueTest, StopsPromptlyWithABacklog) {
  absl::Time start = absl::Now();
  {
    RecycleQueue queue(/*per_second=*/0.1, [](const std::string&) {});
    for (int i = 0; i < 5; ++i) queue.Enqueue("sb-" + std::to_string(i));
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_GE(queue.backlog(), 4);  // One went at once; the next would take 10 s.
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace moat::agent
