#include "controller/tenants/quota.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moat::controller {
namespace {

std::string Gib(uint64_t bytes) { return absl::StrFormat("%.2f GiB", bytes / double(1ULL << 30)); }

}  // namespace

absl::Status CheckQuota(const std::string& tenant, const TenantQuota& quota,
                        const TenantUsage& usage, const scheduler::Resources& request) {
  auto refuse = [&](absl::string_view name, const std::string& detail) {
    return absl::PermissionDeniedError(absl::StrCat(
        "tenant \"", tenant, "\" is over its quota ", name, ": ", detail,
        "; delete sandboxes or ask an administrator to raise the quota (moat tenant quota)"));
  };
  if (quota.max_sandboxes > 0 && usage.sandboxes + 1 > quota.max_sandboxes) {
    return refuse("quota.max_sandboxes",
                  absl::StrCat(usage.sandboxes, " of ", quota.max_sandboxes, " sandboxes in use"));
  }
  // A little slack for the sum of decimal fractions (0.1 + 0.2 cores).
  if (quota.max_cpu > 0 && usage.cpu + request.cpu > quota.max_cpu + 1e-9) {
    return refuse("quota.max_cpu", absl::StrFormat("%g of %g cores in use, %g more asked",
                                                   usage.cpu, quota.max_cpu, request.cpu));
  }
  if (quota.max_memory > 0 && usage.memory + request.memory > quota.max_memory) {
    return refuse("quota.max_memory",
                  absl::StrCat(Gib(usage.memory), " of ", Gib(quota.max_memory), " in use, ",
                               Gib(request.memory), " more asked"));
  }
  return absl::OkStatus();
}

absl::Status CreateRateLimiter::Acquire(const std::string& tenant, double creates_per_minute) {
  if (creates_per_minute <= 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  Bucket& b = buckets_[tenant];
  if (b.limiter == nullptr || b.rate != creates_per_minute) {
    b.rate = creates_per_minute;
    b.limiter = std::make_unique<TokenBucket>(TokenBucket::PerMinute(clock_, creates_per_minute));
  }
  absl::Duration wait = b.limiter->TryAcquire();
  if (wait == absl::ZeroDuration()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "tenant \"%s\" is over its quota quota.creates_per_minute (%g a minute); retry in %.1f s",
      tenant, creates_per_minute, std::ceil(absl::ToDoubleSeconds(wait) * 10) / 10));
}

}  // namespace moat::controller
