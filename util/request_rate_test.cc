#include "util/request_rate.h"

#include "gtest/gtest.h"

namespace moat {
namespace {

TEST(RequestRateTest, EmptyReadsZero) {
  FakeClock clock;
  RequestRate rate(&clock);
  EXPECT_EQ(rate.PeakPerMinute(), 0);
  EXPECT_EQ(rate.TotalLastHour(), 0);
}

TEST(RequestRateTest, CountsPerMinuteAndKeepsThePeak) {
  FakeClock clock;
  RequestRate rate(&clock);
  for (int i = 0; i < 3; ++i) rate.Record();
  clock.Advance(absl::Minutes(1));
  for (int i = 0; i < 7; ++i) rate.Record();
  clock.Advance(absl::Minutes(1));
  rate.Record();
  EXPECT_EQ(rate.PeakPerMinute(), 7);
  EXPECT_EQ(rate.TotalLastHour(), 11);
}

TEST(RequestRateTest, RequestsOlderThanAnHourDropOut) {
  FakeClock clock;
  RequestRate rate(&clock);
  for (int i = 0; i < 5; ++i) rate.Record();  // Minute 0.
  clock.Advance(absl::Minutes(30));
  rate.Record();                     // Minute 30.
  clock.Advance(absl::Minutes(29));  // Minute 59: minute 0 is still in the window.
  EXPECT_EQ(rate.PeakPerMinute(), 5);
  EXPECT_EQ(rate.TotalLastHour(), 6);
  clock.Advance(absl::Minutes(1));  // Minute 60: minute 0 has left.
  EXPECT_EQ(rate.PeakPerMinute(), 1);
  EXPECT_EQ(rate.TotalLastHour(), 1);
  clock.Advance(absl::Minutes(30));
  EXPECT_EQ(rate.TotalLastHour(), 0);
}

TEST(RequestRateTest, ABucketReusedAnHourLaterStartsFromZero) {
  FakeClock clock;
  RequestRate rate(&clock);
  for (int i = 0; i < 4; ++i) rate.Record();
  clock.Advance(absl::Hours(1));  // The same ring slot, a different minute.
  rate.Record();
  EXPECT_EQ(rate.PeakPerMinute(), 1);
  EXPECT_EQ(rate.TotalLastHour(), 1);
}

TEST(RequestRateTest, ALongSilenceForgetsEverything) {
  FakeClock clock;
  RequestRate rate(&clock);
  for (int m = 0; m < 60; ++m) {
    rate.Record();
    clock.Advance(absl::Minutes(1));
  }
  EXPECT_EQ(rate.TotalLastHour(), 59);  // Minute 0 just left.
  clock.Advance(absl::Hours(5));
  EXPECT_EQ(rate.TotalLastHour(), 0);
  EXPECT_EQ(rate.PeakPerMinute(), 0);
}

}  // namespace
}  // namespace moat
