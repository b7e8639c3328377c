#include "bench/latency_stats.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"

namespace moat::bench {
namespace {

std::vector<absl::Duration> Millis(std::vector<int> ms) {
  std::vector<absl::Duration> out;
  for (int m : ms) out.push_back(absl::Milliseconds(m));
  return out;
}

TEST(SummarizeTest, EmptySampleHasNoRuns) { EXPECT_EQ(Summarize({}).runs, 0); }

TEST(SummarizeTest, OddSampleMedianIsTheMiddleValueWhateverTheOrder) {
  const LatencySummary s = Summarize(Millis({9, 1, 5, 3, 7}));
  EXPECT_EQ(s.runs, 5);
  EXPECT_EQ(s.median, absl::Milliseconds(5));
  EXPECT_EQ(s.min, absl::Milliseconds(1));
  EXPECT_EQ(s.max, absl::Milliseconds(9));
}

TEST(SummarizeTest, EvenSampleMedianIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_EQ(Summarize(Millis({4, 1, 10, 2})).median, absl::Microseconds(3000));
}

TEST(SummarizeTest, P90OfOneToTenIsNine) {
  std::vector<absl::Duration> sample = Millis({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  std::shuffle(sample.begin(), sample.end(), std::mt19937(7));
  EXPECT_EQ(Summarize(sample).p90, absl::Milliseconds(9));
}

TEST(SummarizeTest, P90IgnoresASingleOutlierInFifty) {
  std::vector<absl::Duration> sample(49, absl::Milliseconds(10));
  sample.push_back(absl::Seconds(3));
  const LatencySummary s = Summarize(sample);
  EXPECT_EQ(s.p90, absl::Milliseconds(10));
  EXPECT_EQ(s.median, absl::Milliseconds(10));
  EXPECT_EQ(s.max, absl::Seconds(3));
}

TEST(NearestRankPercentileTest, RanksOnSmallSamples) {
  const std::vector<absl::Duration> sorted = Millis({10, 20, 30});
  EXPECT_EQ(NearestRankPercentile(sorted, 1), absl::Milliseconds(10));
  EXPECT_EQ(NearestRankPercentile(sorted, 34), absl::Milliseconds(20));
  EXPECT_EQ(NearestRankPercentile(sorted, 66), absl::Milliseconds(20));
  EXPECT_EQ(NearestRankPercentile(sorted, 67), absl::Milliseconds(30));
  EXPECT_EQ(NearestRankPercentile(sorted, 100), absl::Milliseconds(30));
}

}  // namespace
}  // namespace moat::bench
