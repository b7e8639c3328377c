#include "bench/latency_stats.h"

#include <algorithm>
#include <cmath>

namespace moat::bench {

absl::Duration NearestRankPercentile(const std::vector<absl::Duration>& sorted, double percent) {
  // Rank ceil(p/100 * n), 1-based; the small epsilon keeps 90% of 10 at rank 9, not 10, when the
  // product comes out as 9.000000000000002.
  const double rank = std::ceil(percent / 100.0 * static_cast<double>(sorted.size()) - 1e-9);
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, double(sorted.size()))) - 1;
  return sorted[index];
}

LatencySummary Summarize(std::vector<absl::Duration> samples) {
  LatencySummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.runs = static_cast<int>(n);
  s.min = samples.front();
  s.max = samples.back();
  s.median = n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  s.p90 = NearestRankPercentile(samples, 90);
  return s;
}

}  // namespace moat::bench
