#include "util/request_rate.h"

#include "gtest/gtest.h"

namespace moat {
namespace {

class RequestRateTest : public ::testing::Test {
 protected:
  void Record(int requests) {
    for (int i = 0; i < requests; ++i) rate_.Record();
  }

  FakeClock clock_;
  RequestRate rate_{&clock_};
};

TEST_F(RequestRateTest, EmptyReadsZero) {
  EXPECT_EQ(rate_.PeakPerMinute(), 0);
  EXPECT_EQ(rate_.TotalLastHour(), 0);
}

TEST_F(RequestRateTest, CountsPerMinuteAndKeepsThePeak) {
  Record(3);
  clock_.Advance(absl::Minutes(1));
  Record(7);
  clock_.Advance(absl::Minutes(1));
  rate_.Record();
  EXPECT_EQ(rate_.PeakPerMinute(), 7);
  EXPECT_EQ(rate_.TotalLastHour(), 11);
}

TEST_F(RequestRateTest, RequestsOlderThanAnHourDropOut) {
  Record(5);  // Minute 0.
  clock_.Advance(absl::Minutes(30));
  rate_.Record();                     // Minute 30.
  clock_.Advance(absl::Minutes(29));  // Minute 59: minute 0 is still in the window.
  EXPECT_EQ(rate_.PeakPerMinute(), 5);
  EXPECT_EQ(rate_.TotalLastHour(), 6);
  clock_.Advance(absl::Minutes(1));  // Minute 60: minute 0 has left.
  EXPECT_EQ(rate_.PeakPerMinute(), 1);
  EXPECT_EQ(rate_.TotalLastHour(), 1);
  clock_.Advance(absl::Minutes(30));
  EXPECT_EQ(rate_.TotalLastHour(), 0);
}

TEST_F(RequestRateTest, ABucketReusedAnHourLaterStartsFromZero) {
  Record(4);
  clock_.Advance(absl::Hours(1));  // The same ring slot, a different minute.
  rate_.Record();
  EXPECT_EQ(rate_.PeakPerMinute(), 1);
  EXPECT_EQ(rate_.TotalLastHour(), 1);
}

TEST_F(RequestRateTest, ALongSilenceForgetsEverything) {
  for (int m = 0; m < 60; ++m) {
    rate_.Record();
    clock_.Advance(absl::Minutes(1));
  }
  EXPECT_EQ(rate_.TotalLastHour(), 59);  // Minute 0 just left.
  clock_.Advance(absl::Hours(5));
  EXPECT_EQ(rate_.TotalLastHour(), 0);
  EXPECT_EQ(rate_.PeakPerMinute(), 0);
}

}  // namespace
}  // namespace moat
