#include "controller/tenants/run_limits.h"

#include "controller/store/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller {
namespace {

using ::testing::HasSubstr;

class RunLimiterTest : public ::testing::Test {
 protected:
  MemoryStore store_;
  FakeClock clock_;
  RunLimiter limiter_{{{"python", absl::Seconds(60), absl::Seconds(15)},
                       {"go", absl::Seconds(10), absl::Seconds(10)}},
                      absl::Minutes(5),
                      &store_,
                      &clock_};

  void Run(const std::string& tenant, int declared_s, int took_s) {
    ASSERT_TRUE(limiter_
                    .Record(tenant, {"python", absl::Seconds(declared_s), absl::Seconds(took_s),
                                     absl::Seconds(1)})
                    .ok());
  }
};

TEST_F(RunLimiterTest, EachLanguageHasItsBaseLimits) {
  auto py = limiter_.LimitsFor("a", "python", std::nullopt);
  ASSERT_TRUE(py.ok());
  EXPECT_EQ(py->wall, absl::Seconds(60));
  EXPECT_EQ(py->cpu, absl::Seconds(15));
  auto go = limiter_.LimitsFor("a", "go", std::nullopt);
  ASSERT_TRUE(go.ok());
  EXPECT_EQ(go->wall, absl::Seconds(10));
  auto bad = limiter_.LimitsFor("a", "cobol", std::nullopt);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(), HasSubstr("python, go"));
}

// A client's language is quoted and escaped in the error (util/quote.h): a newline or a quote in
// it cannot forge a log line or end the quoted name early.
TEST_F(RunLimiterTest, AnUnknownLanguageIsQuotedInTheError) {
  auto bad = limiter_.LimitsFor("a", "py\"\n[error] forged", std::nullopt);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(R"(unknown language "py\"\n[error] forged"; )"));
}

TEST_F(RunLimiterTest, ADeclarationExtendsTheWallAndKeepsTheRatio) {
  auto r = limiter_.LimitsFor("a", "python", absl::Minutes(2));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->wall, absl::Seconds(150));  // 1.25 x 2 min.
  EXPECT_EQ(r->cpu, absl::Seconds(37.5));  // 15/60 of the wall.
  // Never above the maximum, never below the base.
  EXPECT_EQ(limiter_.LimitsFor("a", "python", absl::Minutes(5))->wall, absl::Minutes(5));
  EXPECT_EQ(limiter_.LimitsFor("a", "python", absl::Seconds(5))->wall, absl::Seconds(60));
  auto too_long = limiter_.LimitsFor("a", "python", absl::Minutes(5) + absl::Seconds(1));
  EXPECT_TRUE(absl::IsInvalidArgument(too_long.status()));
  EXPECT_THAT(too_long.status().message(), HasSubstr("max_declared_duration"));
  EXPECT_FALSE(limiter_.LimitsFor("a", "python", absl::ZeroDuration()).ok());
}

TEST_F(RunLimiterTest, ATenantThatKeepsUnderestimatingGetsLowerDefaults) {
  Run("a", 10, 30);
  Run("a", 10, 30);
  EXPECT_FALSE(limiter_.LimitsFor("a", "python", std::nullopt)->lowered);  // Two: not yet.
  Run("a", 10, 30);
  auto r = limiter_.LimitsFor("a", "python", std::nullopt);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->lowered);
  EXPECT_EQ(r->wall, absl::Seconds(30));
  EXPECT_EQ(r->cpu, absl::Seconds(7.5));
  // Another tenant is judged on its own record.
  EXPECT_FALSE(limiter_.LimitsFor("b", "python", std::nullopt)->lowered);
  // Accurate runs since: the underestimates are no longer half of the recent ones.
  for (int i = 0; i < 4; ++i) Run("a", 30, 20);
  EXPECT_FALSE(limiter_.LimitsFor("a", "python", std::nullopt)->lowered);
}

TEST_F(RunLimiterTest, TheRecordSurvivesARestartThroughTheStore) {
  for (int i = 0; i < 3; ++i) Run("a", 10, 30);
  RunLimiter restarted({{"python", absl::Seconds(60), absl::Seconds(15)}}, absl::Minutes(5),
                       &store_, &clock_);
  EXPECT_TRUE(restarted.LimitsFor("a", "python", std::nullopt)->lowered);
  auto history = restarted.History("a");
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 3u);
  EXPECT_EQ((*history)[0].declared, absl::Seconds(10));
  EXPECT_EQ((*history)[0].wall, absl::Seconds(30));
  for (int i = 0; i < 30; ++i) Run("a", 10, 5);
  EXPECT_EQ(limiter_.History("a")->size(), static_cast<size_t>(RunLimiter::kKept));
}

TEST(RunLimitsDefaultsTest, WithoutConfigPythonJavascriptAndShell) {
  auto l = LanguagesOrDefaults({});
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[1].name, "javascript");
  EXPECT_EQ(l[1].cpu, absl::Seconds(15));
}

}  // namespace
}  // namespace moat::controller
