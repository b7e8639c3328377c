#include "util/token_bucket.h"

#include "gtest/gtest.h"

namespace moat {
namespace {

TEST(TokenBucketTest, PacesToTheRate) {
  FakeClock clock;
  TokenBucket limiter(&clock, /*per_second=*/4);
  EXPECT_EQ(limiter.TryAcquire(), absl::ZeroDuration());  // The first is free (burst 1).
  EXPECT_EQ(limiter.TryAcquire(), absl::Milliseconds(250));
  clock.Advance(absl::Milliseconds(100));
  EXPECT_EQ(limiter.TryAcquire(), absl::Milliseconds(150));
  clock.Advance(absl::Milliseconds(150));
  EXPECT_EQ(limiter.TryAcquire(), absl::ZeroDuration());
  // A long idle time does not bank more than the burst.
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(limiter.TryAcquire(), absl::ZeroDuration());
  EXPECT_GT(limiter.TryAcquire(), absl::ZeroDuration());
}

// N a minute: a minute's worth at once, then one every 60/N s, exactly; fractions of one a minute
// work too (one every two minutes).
TEST(TokenBucketTest, PerMinuteRefillsExactlyOnSchedule) {
  FakeClock clock;
  TokenBucket bucket = TokenBucket::PerMinute(&clock, 7);
  for (int i = 0; i < 7; ++i) ASSERT_EQ(bucket.TryAcquire(), absl::ZeroDuration()) << i;
  EXPECT_GT(bucket.TryAcquire(), absl::Seconds(8));  // one every 8.57 s
  for (int i = 0; i < 700; ++i) {
    clock.Advance(absl::Minutes(1) / 7);
    ASSERT_EQ(bucket.TryAcquire(), absl::ZeroDuration()) << "refill " << i << " came late";
  }
  EXPECT_GT(bucket.TryAcquire(), absl::ZeroDuration());

  TokenBucket slow = TokenBucket::PerMinute(&clock, 0.5);
  EXPECT_EQ(slow.TryAcquire(), absl::ZeroDuration());  // at least one at once
  EXPECT_EQ(slow.TryAcquire(), absl::Minutes(2));
}

TEST(TokenBucketTest, AClockSteppingBackRefillsNothing) {
  FakeClock clock;
  TokenBucket bucket = TokenBucket::PerMinute(&clock, 1);
  ASSERT_EQ(bucket.TryAcquire(), absl::ZeroDuration());
  clock.Advance(-absl::Hours(1));
  EXPECT_GT(bucket.TryAcquire(), absl::ZeroDuration());
  clock.Advance(absl::Hours(1) + absl::Seconds(30));
  EXPECT_EQ(bucket.TryAcquire(), absl::Seconds(30));  // 30 s since the token was taken
}

}  // namespace
}  // namespace moat
