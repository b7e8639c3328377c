// network.requestsPerMinute as a token bucket: up to a minute's worth of requests at once, then
// one more every 60/N seconds. A bucket rather than a fixed window so a client cannot double the
// rate by bursting at the boundary between two windows.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace moat::egress {

// Thread-safe.
class RateLimiter {
 public:
  // `per_minute` == 0 means no limit. `now` is the clock (tests pass a fake one).
  explicit RateLimiter(uint32_t per_minute, std::function<absl::Time()> now = absl::Now);

  // Takes one token; false when the bucket is empty (the request gets 429).
  bool TryAcquire();

  uint32_t per_minute() const { return per_minute_; }

 private:
  const uint32_t per_minute_;
  const std::function<absl::Time()> now_;
  absl::Mutex mu_;
  // The bucket as time: each request costs a minute / per_minute_, the bucket holds at most a
  // minute. Durations are exact integers, so refills land exactly on schedule.
  absl::Duration credit_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::egress
