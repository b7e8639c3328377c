#include "sandbox/output/result.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace moat::sandbox {
namespace {

TEST(ResultTest, ExitedResultHasTheContractFields) {
  RunResult r;
  r.status = RunStatus::kExited;
  r.exit_code = 3;
  r.stdout_text.text = "out";
  r.stderr_text.text = "err";
  r.stderr_text.truncated = true;
  r.wall_seconds = 0.5;
  r.cpu_seconds = 0.25;
  r.peak_memory_bytes = 4096;
  r.violations.push_back({"seccomp", "blocked system call mount"});
  nlohmann::json j = ToJson(r);
  EXPECT_EQ(j["status"], "exited");
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_TRUE(j["signal"].is_null());
  EXPECT_EQ(j["stdout"], "out");
  EXPECT_EQ(j["stderr"], "err");
  EXPECT_EQ(j["stdout_truncated"], false);
  EXPECT_EQ(j["stderr_truncated"], true);
  EXPECT_DOUBLE_EQ(j["wall_seconds"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["cpu_seconds"].get<double>(), 0.25);
  EXPECT_EQ(j["peak_memory_bytes"], 4096);
  ASSERT_EQ(j["violations"].size(), 1u);
  EXPECT_EQ(j["violations"][0]["kind"], "seccomp");
  EXPECT_EQ(j["violations"][0]["detail"], "blocked system call mount");
  EXPECT_EQ(ExitStatusFor(r), 3);
}

TEST(ResultTest, SignaledAndTimeoutStatuses) {
  RunResult r;
  r.status = RunStatus::kSignaled;
  r.signal = SIGSEGV;
  nlohmann::json j = ToJson(r);
  EXPECT_EQ(j["status"], "signaled");
  EXPECT_TRUE(j["exit_code"].is_null());
  EXPECT_EQ(j["signal"], SIGSEGV);
  EXPECT_EQ(ExitStatusFor(r), 128 + SIGSEGV);

  r.status = RunStatus::kWallTimeout;
  r.signal = SIGKILL;
  EXPECT_EQ(ToJson(r)["status"], "wall_timeout");
  EXPECT_EQ(ExitStatusFor(r), 124);
  r.status = RunStatus::kCpuTimeout;
  EXPECT_EQ(ToJson(r)["status"], "cpu_timeout");
  EXPECT_EQ(ExitStatusFor(r), 124);
  r.status = RunStatus::kOomKilled;
  EXPECT_EQ(ToJson(r)["status"], "oom_killed");
  EXPECT_EQ(ExitStatusFor(r), 128 + SIGKILL);
  EXPECT_TRUE(ToJson(r)["violations"].is_array());
}

}  // namespace
}  // namespace moat::sandbox
