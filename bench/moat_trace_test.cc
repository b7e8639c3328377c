#include "bench/moat_trace.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::bench {
namespace {

using ::testing::HasSubstr;

TEST(ParseMoatTraceTest, ReadsPhasesInOrderAndIgnoresOtherLines) {
  const std::vector<TracePhase> phases = ParseMoatTrace(
      "some output of the command\n"
      "moat trace:    0.552 ms  cgroup created\n"
      "moat trace:   10.017 ms  mount plan\n"
      "moat: violation (x): y\n"
      "moat trace:   28.297 ms  supervision done\n");
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[0].name, "cgroup created");
  EXPECT_EQ(phases[0].at, absl::Microseconds(552));
  EXPECT_EQ(phases[1].name, "mount plan");
  EXPECT_EQ(phases[2].name, "supervision done");
  EXPECT_EQ(phases[2].at, absl::Microseconds(28297));
}

TEST(ParseMoatTraceTest, SkipsMalformedLines) {
  EXPECT_TRUE(
      ParseMoatTrace("moat trace: soon ms  x\nmoat trace: 1.0 ms\nmoat trace: 3\n").empty());
}

TEST(FormatTraceTest, ShowsEachPhaseDurationAndWhatTheTimelineMisses) {
  const std::string table =
      FormatTrace({{"cgroup created", absl::Milliseconds(1)}, {"clone3", absl::Milliseconds(4)}},
                  absl::Milliseconds(10));
  EXPECT_THAT(table, HasSubstr("cgroup created"));
  EXPECT_THAT(table, HasSubstr("    1.000     1.000\n"));  // at 1 ms, took 1 ms
  EXPECT_THAT(table, HasSubstr("    4.000     3.000\n"));  // at 4 ms, took 3 ms
  EXPECT_THAT(table, HasSubstr("outside the timeline"));
  EXPECT_THAT(table, HasSubstr("6.000\n"));  // 10 ms total - 4 ms
  EXPECT_THAT(table, HasSubstr("10.000\n"));
}

}  // namespace
}  // namespace moat::bench
