// How many create requests a profile got in the last hour, in one-minute buckets: the signal the
// warm pool sizes itself by (docs/pool.md). Time comes from a Clock so tests step it.
//
// A ring of 60 buckets; each remembers which minute it counts, so a bucket left over from an
// earlier hour reads as empty instead of being cleared by a timer. The window is the current
// minute (partly elapsed) and the 59 before it.
//
// Not thread-safe: its owner (the warm pool) holds its own lock around it.
#pragma once

#include <array>
#include <cstdint>

#include "absl/time/time.h"
#include "util/clock.h"

namespace moat {

class RequestRate {
 public:
  static constexpr int kBuckets = 60;
  static constexpr absl::Duration kBucketWidth = absl::Minutes(1);

  explicit RequestRate(const Clock* clock) : clock_(clock) {}

  void Record();
  // The busiest minute of the window (its request count); 0 if none.
  int64_t PeakPerMinute() const;
  // All requests in the window.
  int64_t TotalLastHour() const;

 private:
  struct Bucket {
    int64_t minute = -1;  // Minutes since the Unix epoch of what `count` counts.
    int64_t count = 0;
  };
  int64_t CurrentMinute() const;
  bool InWindow(const Bucket& bucket, int64_t now_minute) const;

  const Clock* clock_;
  std::array<Bucket, kBuckets> buckets_;
};

}  // namespace moat
