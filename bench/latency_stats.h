// Order statistics of a sample of latencies. Medians and high percentiles, not means: start-up
// times have a long right tail (page faults, scheduler noise), and one slow run should not move
// the headline number.
#pragma once

#include <vector>

#include "absl/time/time.h"

namespace moat::bench {

struct LatencySummary {
  int runs = 0;
  absl::Duration min;
  absl::Duration median;  // the mean of the two middle values when `runs` is even
  absl::Duration p90;     // nearest rank: the smallest value with at least 90% of runs at or below
  absl::Duration max;
};

// Summarises `samples` (any order). An empty sample gives a summary with runs == 0.
LatencySummary Summarize(std::vector<absl::Duration> samples);

// The nearest-rank percentile of an ascending, non-empty sample; `percent` in (0, 100].
absl::Duration NearestRankPercentile(const std::vector<absl::Duration>& sorted, double percent);

}  // namespace moat::bench
