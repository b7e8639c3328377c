#include "node-agent/event_log.h"

#include "gtest/gtest.h"

namespace moat::agent {
namespace {

TEST(EventLogTest, KeepsTheNewestInOrderAndReadsAfterASeq) {
  EventLog log(3);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(log.Add(absl::UnixEpoch() + absl::Seconds(i), "violation", "sb-a", "syscall",
                      std::to_string(i)),
              static_cast<uint64_t>(i + 1));
  }
  std::vector<AgentEvent> all = log.Since(0, 100);
  ASSERT_EQ(all.size(), 3u);  // the two oldest were dropped
  EXPECT_EQ(all[0].seq, 3u);
  EXPECT_EQ(all[2].detail, "4");
  std::vector<AgentEvent> after = log.Since(4, 100);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].seq, 5u);
  EXPECT_EQ(log.Since(0, 2).size(), 2u);
  EXPECT_TRUE(log.Since(5, 10).empty());
}

TEST(EventLogTest, CutsLongDetails) {
  EventLog log;
  log.Add(absl::Now(), "violation", "sb-a", "mount", std::string(5000, 'x'));
  EXPECT_EQ(log.Since(0, 1)[0].detail.size(), 1024u);
}

}  // namespace
}  // namespace moat::agent
