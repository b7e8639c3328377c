// Reliability: sandboxes start every time. (A cloned child once hung in glibc's setgroups, which
// waited for the cgroup warm-up thread that does not exist in the child; ~3% of runs.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

// A sandbox that takes seconds to start is a hang: starting one takes milliseconds. moat's own
// setup deadline is 10 s, so a hang is caught here (and moat killed) after 3 s.
TEST_F(E2eTest, SetupNeverHangs) {
  constexpr int kRuns = 60;
  int hung = 0, failed = 0;
  std::string errors;
  for (int i = 0; i < kRuns; ++i) {
    MoatOptions options;
    options.kill_after_seconds = 3;
    MoatProcess moat({"run", "--", "/bin/true"}, options);
    // Wait() reports a killed moat as a test failure itself; count for the summary.
    MoatResult r = moat.Wait();
    if (r.killed_by_harness) {
      ++hung;
    } else if (r.exit_code != 0) {
      ++failed;
      absl::StrAppend(&errors, r.err);
    }
  }
  EXPECT_EQ(hung, 0) << hung << " of " << kRuns << " sandboxes hung in setup";
  EXPECT_EQ(failed, 0) << errors;
}

}  // namespace
}  // namespace moat::e2e
