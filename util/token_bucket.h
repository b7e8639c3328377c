// A token bucket: at most `per_second` events per second on average, bursts up to `burst`.
// Time comes from a Clock, so tests step it instead of sleeping. Not thread-safe: the one
// thread that paces its work owns it.
#pragma once

#include <algorithm>

#include "absl/time/time.h"
#include "util/clock.h"

namespace moat {

class TokenBucket {
 public:
  TokenBucket(const Clock* clock, double per_second, double burst = 1)
      : clock_(clock),
        per_second_(per_second),
        burst_(burst),
        tokens_(burst),
        last_(clock->Now()) {}

  // Takes a token if one is there; otherwise returns how long until one is (never negative).
  absl::Duration TryAcquire() {
    Refill();
    if (tokens_ >= 1) {
      tokens_ -= 1;
      return absl::ZeroDuration();
    }
    return absl::Seconds((1 - tokens_) / per_second_);
  }

 private:
  void Refill() {
    absl::Time now = clock_->Now();
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * per_second_);
    last_ = now;
  }

  const Clock* clock_;
  double per_second_;
  double burst_;
  double tokens_;
  absl::Time last_;
};

}  // namespace moat
