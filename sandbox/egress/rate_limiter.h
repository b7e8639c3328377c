// network.requestsPerMinute as a token bucket: up to a minute's worth of requests at once, then
// one more every 60/N seconds. A bucket rather than a fixed window so a client cannot double the
// rate by bursting at the boundary between two windows.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "util/clock.h"
#include "util/token_bucket.h"

namespace moat::egress {

// Thread-safe.
class RateLimiter {
 public:
  // `per_minute` == 0 means no limit.
  explicit RateLimiter(uint32_t per_minute, const Clock* clock = SystemClock());

  // Takes one token; false when the bucket is empty (the request gets 429).
  bool TryAcquire();

  uint32_t per_minute() const { return per_minute_; }

 private:
  const uint32_t per_minute_;
  absl::Mutex mu_;
  std::optional<TokenBucket> bucket_ ABSL_GUARDED_BY(mu_);  // none: no limit
};

}  // namespace moat::egress
