// A token bucket, kept as time: each token costs `every`, the bucket holds at most `burst`
// tokens' worth, and time refills it. Durations are exact integers (absl::Duration), so a rate
// such as N per minute refills exactly on schedule. A clock that steps back refills nothing.
// Time comes from a Clock, so tests step it instead of sleeping. Not thread-safe: its owner
// paces one thread, or holds a lock around it (egress/rate_limiter.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"
#include "util/clock.h"

namespace moat {

class TokenBucket {
 public:
  // `per_second` tokens a second on average (> 0), bursts of up to `burst` (>= 1).
  TokenBucket(const Clock* clock, double per_second, double burst = 1)
      : TokenBucket(clock, absl::Seconds(1) / per_second, absl::Seconds(1) / per_second * burst) {}
  // `per_minute` (> 0) a minute, up to a minute's worth at once (at least one): a policy's
  // requestsPerMinute, a tenant's creates_per_minute.
  static TokenBucket PerMinute(const Clock* clock, double per_minute) {
    // A whole number divides a minute exactly (to absl's quarter nanosecond); a double would not.
    const int64_t whole = static_cast<int64_t>(per_minute);
    const absl::Duration every =
        whole == per_minute ? absl::Minutes(1) / whole : absl::Minutes(1) / per_minute;
    return TokenBucket(clock, every, std::max(every, absl::Minutes(1)));
  }

  // Takes a token if one is there; otherwise returns how long until one is (never negative).
  absl::Duration TryAcquire() {
    const absl::Time now = clock_->Now();
    if (now > last_) {
      credit_ = std::min(capacity_, credit_ + (now - last_));
      last_ = now;
    }
    if (credit_ >= every_) {
      credit_ -= every_;
      return absl::ZeroDuration();
    }
    return every_ - credit_;
  }

 private:
  TokenBucket(const Clock* clock, absl::Duration every, absl::Duration capacity)
      : clock_(clock),
        every_(every),
        capacity_(capacity),
        credit_(capacity_),
        last_(clock->Now()) {}

  const Clock* clock_;
  absl::Duration every_;     // the cost of one token
  absl::Duration capacity_;  // burst tokens' worth
  absl::Duration credit_;    // what is in the bucket now
  absl::Time last_;
};

}  // namespace moat
