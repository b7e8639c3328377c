#include "sandbox/egress/rate_limiter.h"

#include <algorithm>
#include <utility>

namespace moat::egress {

RateLimiter::RateLimiter(uint32_t per_minute, std::function<absl::Time()> now)
    : per_minute_(per_minute), now_(std::move(now)), credit_(absl::Minutes(1)), last_(now_()) {}

bool RateLimiter::TryAcquire() {
  if (per_minute_ == 0) return true;
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  // A clock that steps back refills nothing (absl::Now is not monotonic).
  if (now > last_) {
    credit_ = std::min(absl::Minutes(1), credit_ + (now - last_));
    last_ = now;
  }
  const absl::Duration cost = absl::Minutes(1) / per_minute_;
  if (credit_ < cost) return false;
  credit_ -= cost;
  return true;
}

}  // namespace moat::egress
