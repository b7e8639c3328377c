#include "sandbox/egress/rate_limiter.h"

namespace moat::egress {

RateLimiter::RateLimiter(uint32_t per_minute, const Clock* clock) : per_minute_(per_minute) {
  if (per_minute > 0) bucket_.emplace(TokenBucket::PerMinute(clock, per_minute));
}

bool RateLimiter::TryAcquire() {
  if (per_minute_ == 0) return true;
  absl::MutexLock lock(&mu_);
  return bucket_->TryAcquire() == absl::ZeroDuration();
}

}  // namespace moat::egress
