#include "util/request_rate.h"

#include <algorithm>

namespace moat {

int64_t RequestRate::CurrentMinute() const {
  return absl::ToInt64Minutes(clock_->Now() - absl::UnixEpoch());
}

bool RequestRate::InWindow(const Bucket& bucket, int64_t now_minute) const {
  return bucket.minute > now_minute - kBuckets && bucket.minute <= now_minute;
}

void RequestRate::Record() {
  int64_t minute = CurrentMinute();
  // Minutes before the epoch would give a negative slot; the clock never reads them.
  Bucket& bucket = buckets_[static_cast<size_t>(minute % kBuckets)];
  if (bucket.minute != minute) bucket = Bucket{minute, 0};
  ++bucket.count;
}

int64_t RequestRate::PeakPerMinute() const {
  int64_t now_minute = CurrentMinute();
  int64_t peak = 0;
  for (const Bucket& bucket : buckets_) {
    if (InWindow(bucket, now_minute)) peak = std::max(peak, bucket.count);
  }
  return peak;
}

int64_t RequestRate::TotalLastHour() const {
  int64_t now_minute = CurrentMinute();
  int64_t total = 0;
  for (const Bucket& bucket : buckets_) {
    if (InWindow(bucket, now_minute)) total += bucket.count;
  }
  return total;
}

}  // namespace moat
