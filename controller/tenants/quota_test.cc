#include "controller/tenants/quota.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/testing/status_matchers.h"

namespace moat::controller {
namespace {

using ::testing::HasSubstr;
constexpr uint64_t kGiB = 1ULL << 30;

TEST(QuotaTest, NoQuotaAdmitsAnything) {
  EXPECT_TRUE(CheckQuota("a", {}, {1000, 1000, 1000 * kGiB}, {64, 256 * kGiB, 0}).ok());
}

TEST(QuotaTest, TheSandboxCountIsAHardCeiling) {
  TenantQuota q{.max_sandboxes = 2};
  EXPECT_TRUE(CheckQuota("a", q, {1, 0, 0}, {1, kGiB, 0}).ok());
  absl::Status st = CheckQuota("a", q, {2, 0, 0}, {1, kGiB, 0});
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("quota.max_sandboxes"));
  EXPECT_THAT(st.message(), HasSubstr("2 of 2"));
  EXPECT_THAT(st.message(), HasSubstr("tenant \"a\""));
}

TEST(QuotaTest, CpuCountsTheRequestOnTopOfTheUsage) {
  TenantQuota q{.max_cpu = 2};
  EXPECT_TRUE(CheckQuota("a", q, {3, 1.5, 0}, {0.5, kGiB, 0}).ok());
  // Decimal fractions that sum to exactly the limit still fit.
  EXPECT_TRUE(CheckQuota("a", q, {3, 0.1 + 0.2 + 1.2, 0}, {0.5, kGiB, 0}).ok());
  absl::Status st = CheckQuota("a", q, {3, 1.5, 0}, {0.6, kGiB, 0});
  EXPECT_TRUE(absl::IsPermissionDenied(st));
  EXPECT_THAT(st.message(), HasSubstr("quota.max_cpu"));
}

TEST(QuotaTest, MemoryCountsBytes) {
  TenantQuota q{.max_memory = 4 * kGiB};
  EXPECT_TRUE(CheckQuota("a", q, {1, 0, 2 * kGiB}, {0, 2 * kGiB, 0}).ok());
  absl::Status st = CheckQuota("a", q, {1, 0, 2 * kGiB}, {0, 2 * kGiB + 1, 0});
  EXPECT_TRUE(absl::IsPermissionDenied(st));
  EXPECT_THAT(st.message(), HasSubstr("quota.max_memory"));
  EXPECT_THAT(st.message(), HasSubstr("2.00 GiB of 4.00 GiB"));
}

TEST(QuotaTest, TheCreateRateRefillsWithTime) {
  FakeClock clock;
  CreateRateLimiter limiter(&clock);
  // 2 a minute: a burst of 2, then one every 30 s.
  EXPECT_TRUE(limiter.Acquire("a", 2).ok());
  EXPECT_TRUE(limiter.Acquire("a", 2).ok());
  absl::Status st = limiter.Acquire("a", 2);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("quota.creates_per_minute"));
  EXPECT_THAT(st.message(), HasSubstr("retry in 30.0 s"));
  // Another tenant has its own bucket.
  EXPECT_TRUE(limiter.Acquire("b", 2).ok());
  clock.Advance(absl::Seconds(29));
  EXPECT_FALSE(limiter.Acquire("a", 2).ok());
  clock.Advance(absl::Seconds(2));
  EXPECT_TRUE(limiter.Acquire("a", 2).ok());
  // No rate: no limit.
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(limiter.Acquire("a", 0).ok());
}

}  // namespace
}  // namespace moat::controller
