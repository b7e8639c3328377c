#include "bench/bench_report.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::bench {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

LatencySummary Ms(int median, int p90 = 0) {
  LatencySummary s;
  s.runs = 50;
  s.median = absl::Milliseconds(median);
  s.p90 = absl::Milliseconds(p90 ? p90 : median);
  s.min = absl::Milliseconds(median);
  s.max = s.p90;
  return s;
}

CaseResult Skipped(std::string command, std::string runner, std::string why) {
  CaseResult r{std::move(command), std::move(runner)};
  r.skipped = std::move(why);
  return r;
}

TEST(MoatRatioTest, DividesMoatsMedianByTheRunnersForTheSameCommand) {
  const std::vector<CaseResult> results = {
      {"/bin/true", "moat", Ms(12)}, {"/bin/true", "bwrap", Ms(4)},     {"python", "moat", Ms(60)},
      {"python", "bwrap", Ms(30)},   Skipped("python", "crun", "gone"),
  };
  EXPECT_DOUBLE_EQ(MoatRatio(results, results[1]), 3.0);
  EXPECT_DOUBLE_EQ(MoatRatio(results, results[3]), 2.0);
  EXPECT_DOUBLE_EQ(MoatRatio(results, results[0]), 1.0);
  EXPECT_EQ(MoatRatio(results, results[4]), 0);
}

TEST(MoatRatioTest, NoMoatRowMeansNoRatio) {
  const std::vector<CaseResult> results = {{"/bin/true", "bwrap", Ms(4)}};
  EXPECT_EQ(MoatRatio(results, results[0]), 0);
}

TEST(FormatResultTableTest, OneRowPerCaseWithTimesRatioAndSkipReason) {
  const std::string table = FormatResultTable({
      {"/bin/true", "moat", Ms(12, 15)},
      {"/bin/true", "fork+exec", Ms(1)},
      Skipped("/bin/true", "crun", "crun not found"),
  });
  EXPECT_THAT(table, HasSubstr("median ms"));
  EXPECT_THAT(table, HasSubstr("p90 ms"));
  EXPECT_THAT(table, HasSubstr("moat/runner"));
  EXPECT_THAT(table, ContainsRegex("/bin/true +moat +50 +0 +12\\.00 +15\\.00 +12\\.00 +1\\.00x\n"));
  EXPECT_THAT(table, ContainsRegex("/bin/true +fork\\+exec +50 +0 +1\\.00 .* 12\\.00x\n"));
  EXPECT_THAT(table, ContainsRegex("/bin/true +crun +skipped: crun not found\n"));
}

TEST(FormatResultTableTest, FailedRunsAreCountedAndExplainedAfterTheTable) {
  CaseResult moat{"/bin/true", "moat", Ms(12)};
  moat.failed = 2;
  moat.failure = "exit status 125: moat run: sandbox setup did not finish in time";
  const std::string table = FormatResultTable({moat});
  EXPECT_THAT(table, ContainsRegex("/bin/true +moat +50 +2 +12\\.00"));
  EXPECT_THAT(table, HasSubstr("failed runs: moat on `/bin/true`: 2, left out of its times; "
                               "first: exit status 125: moat run: sandbox setup did not finish"));
}

TEST(FormatResultTableTest, NoFailureLinesWhenEverythingSucceeded) {
  EXPECT_THAT(FormatResultTable({{"/bin/true", "moat", Ms(12)}}),
              ::testing::Not(HasSubstr("failed runs")));
}

}  // namespace
}  // namespace moat::bench
