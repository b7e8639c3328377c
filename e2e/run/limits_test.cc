// Resource exhaustion: process and thread bombs stop at --pids, memory bombs are OOM-killed at
// --memory, CPU loops end at --cpu-timeout, sleepers at --wall-timeout (promptly, whatever they do
// with signals), and disks fill only up to --tmpfs-size without touching the host's disk.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/statvfs.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The N of "blocked <what> after N: ..." in `out`, or -1.
int CountAfter(const std::string& out, absl::string_view what) {
  std::string prefix = absl::StrCat("blocked ", what, " after ");
  size_t at = out.find(prefix);
  if (at == std::string::npos) return -1;
  int n = -1;
  std::string rest = out.substr(at + prefix.size());
  if (!absl::SimpleAtoi(rest.substr(0, rest.find_first_of(" :")), &n)) return -1;
  return n;
}

TEST_F(E2eTest, ForkBombStopsAtThePidsLimit) {
  MoatResult raw;
  nlohmann::json r =
      RunJson({"--pids", "20", "--wall-timeout", "20s"}, {Attack("fork_probe"), "procs"}, {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "exited") << Describe(r);
  int forked = CountAfter(r["stdout"], "fork");
  EXPECT_GE(forked, 5) << Describe(r);  // the limit is a limit, not a ban
  EXPECT_LT(forked, 20) << "ATTACK SUCCEEDED: more processes than --pids\n" << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr(": EAGAIN")) << Describe(r);
  EXPECT_LT(raw.seconds, Scaled(10));
}

TEST_F(E2eTest, ThreadBombStopsAtThePidsLimit) {
  nlohmann::json r =
      RunJson({"--pids", "20", "--wall-timeout", "20s"}, {Attack("fork_probe"), "threads"});
  ASSERT_TRUE(r.is_object());
  int threads = CountAfter(r["stdout"], "thread");
  EXPECT_GE(threads, 5) << Describe(r);
  EXPECT_LT(threads, 20) << "ATTACK SUCCEEDED: more threads than --pids\n" << Describe(r);
}

TEST_F(E2eTest, ShellForkBombEndsAtTheWallLimitAndLeavesNothing) {
  const std::string digits = UniqueDigits();
  // The classic bomb; every copy carries the marker in its command line. The main shell forks
  // once, into a subshell that sets the bomb off, then becomes a sleep without forking (exec): at
  // the pids limit a fork fails and a shell that meets a failed fork exits, so the main shell must
  // not fork after the bomb started (dash forks each member of `b | b &` itself: calling `b` in
  // the main shell made it meet the limit on its second fork on a loaded machine, and the run end
  // as `exited` before the wall limit).
  MoatResult raw;
  nlohmann::json r =
      RunJson({"--pids", "32", "--wall-timeout", "1500ms"},
              Sh(absl::StrCat("b() { b | b & }; (b) & exec sleep 30.", digits)), {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "wall_timeout") << Describe(r);
  EXPECT_LT(raw.seconds, Scaled(6)) << "moat did not return promptly";
  EXPECT_TRUE(PidsWithMarker(digits).empty()) << "ATTACK SUCCEEDED: bomb processes outlived moat";
  EXPECT_TRUE(CgroupDirsOf(raw.pid).empty());
}

TEST_F(E2eTest, MemoryBombIsOomKilled) {
  MoatResult raw;
  nlohmann::json r =
      RunJson({"--memory", "32M", "--wall-timeout", "20s"}, {Attack("mem_bomb")}, {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "oom_killed") << Describe(r);
  EXPECT_EQ(r["signal"], SIGKILL) << Describe(r);
  EXPECT_TRUE(HasViolation(r, "memory", "OOM")) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
  uint64_t peak = r["peak_memory_bytes"];
  EXPECT_LE(peak, 34u << 20) << "ATTACK SUCCEEDED: the bomb grew past --memory";
  EXPECT_GE(peak, 16u << 20) << "the bomb was stopped long before the limit: " << peak;
  EXPECT_LT(raw.seconds, Scaled(10));

  MoatResult plain = RunPlain({"--memory", "32M"}, {Attack("mem_bomb")});
  EXPECT_EQ(plain.exit_code, 128 + SIGKILL) << plain.err;
  EXPECT_THAT(plain.err, HasSubstr("memory limit")) << plain.err;
}

// moat keeps finished sandboxes' cgroups for the next run (cgroup v1); what one run did must not
// show in the results of the runs after it.
TEST_F(E2eTest, RunsAfterAnOomKillAndAForkBombReportOnlyThemselves) {
  nlohmann::json bomb = RunJson({"--memory", "32M", "--wall-timeout", "20s"}, {Attack("mem_bomb")});
  ASSERT_TRUE(bomb.is_object());
  EXPECT_EQ(bomb["status"], "oom_killed") << Describe(bomb);
  nlohmann::json forks =
      RunJson({"--pids", "20", "--wall-timeout", "20s"}, {Attack("fork_probe"), "procs"});
  ASSERT_TRUE(forks.is_object());
  EXPECT_TRUE(HasViolation(forks, "pids", "refused")) << Describe(forks);
  for (int i = 0; i < 3; ++i) {
    nlohmann::json r = RunJson({}, {"/bin/true"});
    ASSERT_TRUE(r.is_object());
    EXPECT_EQ(r["status"], "exited") << Describe(r);
    EXPECT_TRUE(r["violations"].empty()) << "an earlier run's OOM kill or refused forks\n"
                                         << Describe(r);
    uint64_t peak = r["peak_memory_bytes"];
    EXPECT_LT(peak, 8u << 20) << "an earlier run's peak memory\n" << Describe(r);
    EXPECT_LT(r["cpu_seconds"].get<double>(), 0.5) << Describe(r);
  }
}

TEST_F(E2eTest, InodeExhaustionIsBoundedByTheMemoryLimit) {
  for (const char* where : {"/tmp", "/workspace", "/dev/shm"}) {
    nlohmann::json r = RunJson({"--memory", "32M", "--wall-timeout", "20s"},
                               {Attack("misc_probe"), "inodes", where, "5000000"});
    ASSERT_TRUE(r.is_object());
    EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
    EXPECT_NE(r["status"], "wall_timeout") << where << ": not stopped by any limit\n"
                                           << Describe(r);
  }
}

TEST_F(E2eTest, CpuLoopEndsAtTheCpuTimeout) {
  MoatResult raw;
  nlohmann::json r = RunJson({"--cpu-timeout", "300ms", "--wall-timeout", "10s"},
                             Sh("while :; do :; done"), {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "cpu_timeout") << Describe(r);
  double cpu = r["cpu_seconds"];
  EXPECT_GE(cpu, 0.29) << Describe(r);
  EXPECT_LT(cpu, 1.5) << "ATTACK SUCCEEDED: the loop ran far past --cpu-timeout";
  EXPECT_LT(raw.seconds, Scaled(6));

  MoatResult plain = RunPlain({"--cpu-timeout", "200ms"}, Sh("while :; do :; done"));
  EXPECT_EQ(plain.exit_code, 124) << plain.err;
}

TEST_F(E2eTest, CpuQuotaHoldsAcrossProcesses) {
  // Four busy processes under a quota of half a core for about a second.
  nlohmann::json r = RunJson({"--cpus", "0.5", "--wall-timeout", "1200ms", "--cpu-timeout", "20s"},
                             Sh("for i in 1 2 3 4; do (while :; do :; done) & done; wait"));
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "wall_timeout") << Describe(r);
  double cpu = r["cpu_seconds"], wall = r["wall_seconds"];
  EXPECT_LE(cpu, 0.5 * wall + 0.25) << "ATTACK SUCCEEDED: more CPU than --cpus\n" << Describe(r);
}

TEST_F(E2eTest, SleepEndsAtTheWallTimeoutPromptly) {
  MoatResult raw;
  nlohmann::json r = RunJson({"--wall-timeout", "300ms"}, {"/bin/sleep", "30"}, {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "wall_timeout") << Describe(r);
  double wall = r["wall_seconds"];
  EXPECT_GE(wall, 0.29);
  EXPECT_LT(wall, 1.5);
  EXPECT_LT(raw.seconds, Scaled(2.5)) << "moat returned late";

  MoatResult plain = RunPlain({"--wall-timeout", "200ms"}, {"/bin/sleep", "30"});
  EXPECT_EQ(plain.exit_code, 124) << plain.err;
  EXPECT_THAT(plain.err, HasSubstr("wall-clock limit")) << plain.err;
}

TEST_F(E2eTest, WallTimeoutKillsStoppedAndSignalIgnoringProcesses) {
  for (const char* script :
       {"kill -STOP $$", "trap '' TERM INT HUP QUIT; sleep 30",
        "trap '' TERM INT HUP; (trap '' TERM INT HUP; sleep 30) & kill -STOP $$"}) {
    MoatResult raw;
    nlohmann::json r = RunJson({"--wall-timeout", "300ms"}, Sh(script), {}, &raw);
    ASSERT_TRUE(r.is_object());
    EXPECT_EQ(r["status"], "wall_timeout") << script << "\n" << Describe(r);
    EXPECT_LT(raw.seconds, Scaled(2.5)) << script;
  }
}

TEST_F(E2eTest, DiskFillStopsAtTheTmpfsSizeAndSparesTheHostDisk) {
  struct statvfs before;
  ASSERT_EQ(::statvfs(dir().path().c_str(), &before), 0);
  std::string script;
  for (const char* d : {"/tmp", "/workspace", "/dev/shm"}) {
    absl::StrAppend(&script, "dd if=/dev/zero of=", d, "/fill bs=1M count=48 2>&1\n", "echo \"", d,
                    " $(du -k ", d, "/fill | cut -f1)\"\n");
  }
  nlohmann::json r = RunJson({"--tmpfs-size", "4M", "--memory", "256M"}, Sh(script));
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, HasSubstr("No space left on device")) << Describe(r);
  for (const char* d : {"/tmp", "/workspace", "/dev/shm"}) {
    size_t at = out.find(absl::StrCat("\n", d, " "));
    ASSERT_NE(at, std::string::npos) << d << "\n" << Describe(r);
    std::string rest = out.substr(at + strlen(d) + 2);
    int kib = 0;
    ASSERT_TRUE(absl::SimpleAtoi(rest.substr(0, rest.find('\n')), &kib)) << out;
    EXPECT_LE(kib, 4096) << "ATTACK SUCCEEDED: " << d << " grew past --tmpfs-size";
    EXPECT_GE(kib, 1024) << d << " was not writable";
  }
  struct statvfs after;
  ASSERT_EQ(::statvfs(dir().path().c_str(), &after), 0);
  // 144 MiB were attempted; the host disk (shared with other work) must not lose anything near it.
  double lost_mib = (static_cast<double>(before.f_bavail) - static_cast<double>(after.f_bavail)) *
                    static_cast<double>(before.f_frsize) / (1 << 20);
  EXPECT_LT(lost_mib, 64) << "the host disk lost " << lost_mib << " MiB";
}

// Starving the host: real-time scheduling, negative nice, I/O real-time, an OOM-proof process,
// lifted core and descriptor limits.
TEST_F(E2eTest, CannotRaisePriorityOrLimits) {
  nlohmann::json r = RunJson({}, {Attack("misc_probe"), "priority"});
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["exit_code"], 0) << Describe(r);
  std::string out = r["stdout"];
  EXPECT_THAT(out, Not(HasSubstr("ESCAPED"))) << Describe(r);
  for (const char* what : {"SCHED_FIFO", "nice -20", "oom_score_adj -1000", "ioprio realtime",
                           "raise RLIMIT_CORE", "raise RLIMIT_NOFILE"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("blocked ", what, ": "))) << Describe(r);
  }
}

}  // namespace
}  // namespace moat::e2e
