#include "sandbox/egress/rate_limiter.h"

#include "gtest/gtest.h"

namespace moat::egress {
namespace {

TEST(RateLimiterTest, AllowsAMinutesWorthAtOnceThenRefuses) {
  FakeClock clock;
  RateLimiter limiter(3, &clock);
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_FALSE(limiter.TryAcquire());
  EXPECT_FALSE(limiter.TryAcquire());
}

TEST(RateLimiterTest, RefillsOneTokenPerSixtyOverNSeconds) {
  FakeClock clock;
  RateLimiter limiter(6, &clock);  // one token every 10 s
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(limiter.TryAcquire());
  ASSERT_FALSE(limiter.TryAcquire());
  clock.Advance(absl::Seconds(9));
  EXPECT_FALSE(limiter.TryAcquire());
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_FALSE(limiter.TryAcquire());
}

TEST(RateLimiterTest, NeverHoldsMoreThanAMinutesWorth) {
  FakeClock clock;
  RateLimiter limiter(2, &clock);
  clock.Advance(absl::Hours(5));
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_FALSE(limiter.TryAcquire());
}

TEST(RateLimiterTest, AClockSteppingBackRefillsNothing) {
  FakeClock clock;
  RateLimiter limiter(1, &clock);
  ASSERT_TRUE(limiter.TryAcquire());
  clock.Advance(-(absl::Hours(1)));
  EXPECT_FALSE(limiter.TryAcquire());
  clock.Advance(absl::Hours(1) + absl::Seconds(30));
  EXPECT_FALSE(limiter.TryAcquire());  // only 30 s since the last token was taken
  clock.Advance(absl::Seconds(30));
  EXPECT_TRUE(limiter.TryAcquire());
}

TEST(RateLimiterTest, ZeroMeansNoLimit) {
  FakeClock clock;
  RateLimiter limiter(0, &clock);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(limiter.TryAcquire());
}

}  // namespace
}  // namespace moat::egress
