// Reliability: sandboxes start every time. (A cloned child once hung in glibc's setgroups, which
// waited for the cgroup warm-up thread that does not exist in the child; ~3% of runs.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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

// MOAT_TRACE prints the setup timeline: the supervisor's steps and, stamped by the sandbox itself
// into shared memory, the child's and the command's, in the order they happened.
TEST_F(E2eTest, TheSetupTraceShowsTheSandboxsOwnStepsInOrder) {
  MoatOptions options;
  options.env = {"MOAT_TRACE=1"};
  MoatResult r = RunPlain({}, {"/bin/true"}, options);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::pair<std::string, double>> steps;
  for (absl::string_view line : absl::StrSplit(r.err, '\n')) {
    if (!absl::ConsumePrefix(&line, "moat trace:")) continue;
    line = absl::StripLeadingAsciiWhitespace(line);
    const size_t ms = line.find(" ms  ");
    ASSERT_NE(ms, absl::string_view::npos) << line;
    double at = 0;
    ASSERT_TRUE(absl::SimpleAtod(line.substr(0, ms), &at)) << line;
    steps.emplace_back(std::string(line.substr(ms + 5)), at);
  }
  auto at = [&](const std::string& name) -> double {
    for (const auto& [step, ms] : steps) {
      if (step == name) return ms;
    }
    ADD_FAILURE() << "no \"" << name << "\" in the trace:\n" << r.err;
    return -1;
  };
  // Each step after the one before it; "command started" is when the supervisor noticed the
  // execve, which may be after the command already ended.
  const std::vector<std::pair<std::string, std::string>> before = {
      {"clone3", "child: id maps received"},
      {"child: id maps received", "child: mounts done, pivoted"},
      {"child: mounts done, pivoted", "child: in its cgroup"},
      {"child: in its cgroup", "child: privileges dropped"},
      {"child: privileges dropped", "command: cloned (pid 2)"},
      {"command: cloned (pid 2)", "command: seccomp on, execve"},
      {"command: seccomp on, execve", "command started"},
      {"command: seccomp on, execve", "init: command exited"},
      {"command started", "init reaped"},
      {"init: command exited", "init reaped"},
      {"init reaped", "supervision done"}};
  for (const auto& [first, second] : before) {
    EXPECT_LE(at(first), at(second)) << first << " / " << second;
  }
  for (size_t i = 1; i < steps.size(); ++i) {
    EXPECT_LE(steps[i - 1].second, steps[i].second) << "printed out of order:\n" << r.err;
  }
}

}  // namespace
}  // namespace moat::e2e
