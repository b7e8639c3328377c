#include "sandbox/egress/rate_limiter.h"

#include <algorithm>
#include <utility>

namespace moat::egress {

RateLimiter::RateLimiter(uint32_t per_minute, std::function<absl::Time()> now)
    : per_minute_(per_minute), now_(std::move(now)), tokens_(per_minute), last_(now_()) {}

bool RateLimiter::TryAcquire() {
  if (per_minute_ == 0) return true;
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  // A clock that steps back refills nothing (absl::Now is not monotonic).
  const double elapsed_minutes = std::max(0.0, absl::ToDoubleMinutes(now - last_));
  last_ = std::max(last_, now);
  tokens_ = std::min<double>(per_minute_, tokens_ + elapsed_minutes * per_minute_);
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

}  // namespace moat::egress
