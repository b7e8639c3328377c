// Per-tenant quotas, checked at admission (SandboxManager::Create, under its lock, so two
// concurrent creates cannot both take the last slot) and the create rate (a token bucket per
// tenant, checked by the API before the create). Zero means "no limit" for every field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "controller/scheduler/framework.h"
#include "util/clock.h"
#include "util/token_bucket.h"

namespace moat::controller {

struct TenantQuota {
  int max_sandboxes = 0;          // Sandboxes at once (Pending and Running).
  double max_cpu = 0;             // Sum of the sandboxes' CPU requests, in cores.
  uint64_t max_memory = 0;        // Sum of their memory requests, in bytes.
  double creates_per_minute = 0;  // Sustained create rate; bursts up to one minute's worth.

  bool operator==(const TenantQuota&) const = default;
};

// What a tenant holds now: the sandboxes that take capacity (Pending and Running).
struct TenantUsage {
  int sandboxes = 0;
  double cpu = 0;
  uint64_t memory = 0;
};

// OK if `usage` plus one sandbox of `request` stays within `quota`; otherwise PermissionDenied
// (HTTP 403) whose message names the quota ("quota.max_cpu"), the limit and the usage.
absl::Status CheckQuota(const std::string& tenant, const TenantQuota& quota,
                        const TenantUsage& usage, const scheduler::Resources& request);

// The create-rate buckets of every tenant. Thread-safe.
class CreateRateLimiter {
 public:
  explicit CreateRateLimiter(const Clock* clock) : clock_(clock) {}
  // OK and a token taken, or ResourceExhausted (the API answers 429) naming
  // quota.creates_per_minute and when to retry. A changed rate starts a fresh bucket.
  absl::Status Acquire(const std::string& tenant, double creates_per_minute);

 private:
  struct Bucket {
    double rate = 0;
    std::unique_ptr<TokenBucket> limiter;
  };
  const Clock* clock_;
  absl::Mutex mu_;
  std::map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::controller
