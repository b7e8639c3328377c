#include "bench/timed_run.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/unique_fd.h"

namespace moat::bench {
namespace {

using ::testing::HasSubstr;

RunSpec Shell(const std::string& script, std::vector<std::string> env = CurrentEnvironment()) {
  return RunSpec{{"/bin/sh", "-c", script}, std::move(env)};
}

TEST(TimedRunTest, SuccessfulCommandHasExitZeroAndAPositiveTime) {
  absl::StatusOr<RunOutcome> out = TimedRun({{"/bin/true"}, CurrentEnvironment()});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(Succeeded(*out));
  EXPECT_GT(out->elapsed, absl::ZeroDuration());
  EXPECT_LT(out->elapsed, absl::Seconds(10));
}

TEST(TimedRunTest, ElapsedCoversTheWholeRun) {
  absl::StatusOr<RunOutcome> out = TimedRun(Shell("sleep 0.2"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_GE(out->elapsed, absl::Milliseconds(200));
}

TEST(TimedRunTest, FailingCommandIsAnOutcomeNotAnError) {
  absl::StatusOr<RunOutcome> out = TimedRun(Shell("exit 3"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(Succeeded(*out));
  EXPECT_EQ(DescribeWaitStatus(out->wait_status), "exit status 3");
}

TEST(TimedRunTest, KilledCommandIsDescribedBySignal) {
  absl::StatusOr<RunOutcome> out = TimedRun(Shell("kill -9 $$"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(Succeeded(*out));
  EXPECT_THAT(DescribeWaitStatus(out->wait_status), HasSubstr("killed by signal 9"));
}

TEST(TimedRunTest, MissingProgramIsAnErrorNamingIt) {
  absl::StatusOr<RunOutcome> out = TimedRun({{"/nonexistent/prog"}, CurrentEnvironment()});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("\"/nonexistent/prog\""));
}

TEST(TimedRunTest, CapturesStdoutAndStderrAndGivesNoStdin) {
  absl::StatusOr<RunOutcome> out = TimedRun(Shell("echo out; echo err >&2; cat; echo end"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output, "out\nerr\nend\n");
  EXPECT_EQ(out->output_bytes, 12u);
}

TEST(TimedRunTest, KeepsTheFirst64KiBButCountsAll) {
  absl::StatusOr<RunOutcome> out = TimedRun(Shell("head -c 100000 /dev/zero"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output.size(), 64u * 1024);
  EXPECT_EQ(out->output_bytes, 100000u);
}

TEST(TimedRunTest, UsesExactlyTheGivenEnvironment) {
  absl::StatusOr<RunOutcome> out =
      TimedRun(Shell("echo \"[$BENCH_A][$HOME]\"", {"BENCH_A=1", "PATH=/usr/bin:/bin"}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output, "[1][]\n");
}

TEST(CurrentEnvironmentTest, DropsAndReplacesByName) {
  ASSERT_EQ(::setenv("BENCH_DROP_ME", "x", 1), 0);
  ASSERT_EQ(::setenv("BENCH_REPLACE_ME", "old", 1), 0);
  const std::vector<std::string> env =
      CurrentEnvironment({"BENCH_DROP_ME"}, {"BENCH_REPLACE_ME=new"});
  auto has = [&](const std::string& e) {
    return std::find(env.begin(), env.end(), e) != env.end();
  };
  EXPECT_FALSE(has("BENCH_DROP_ME=x"));
  EXPECT_FALSE(has("BENCH_REPLACE_ME=old"));
  EXPECT_TRUE(has("BENCH_REPLACE_ME=new"));
  EXPECT_EQ(
      std::count_if(env.begin(), env.end(),
                    [](const std::string& e) { return e.rfind("BENCH_REPLACE_ME=", 0) == 0; }),
      1);
}

// The namespace switch: a private mount namespace made by a helper process that mounts a tmpfs
// on a fresh directory; the command must see that tmpfs, the test process must not, and the
// test's working directory must be unchanged.
TEST(TimedRunTest, StartsTheCommandInTheGivenMountNamespace) {
  if (::geteuid() != 0) GTEST_SKIP() << "setns into a mount namespace needs root";
  char dir_template[] = "/tmp/timed_run_test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t helper = ::fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    ::close(ready[0]);
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(1);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(1);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, nullptr) != 0) ::_exit(1);
    const int fd = ::open((dir + "/marker").c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) ::_exit(1);
    ::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "helper could not make its namespace";
  ::close(ready[0]);
  UniqueFd ns(::open(("/proc/" + std::to_string(helper) + "/ns/mnt").c_str(), O_RDONLY));
  ASSERT_TRUE(ns.valid());
  ::kill(helper, SIGKILL);
  ::waitpid(helper, nullptr, 0);

  char before[4096];
  ASSERT_NE(::getcwd(before, sizeof(before)), nullptr);
  RunSpec spec = Shell("test -e " + dir + "/marker");
  spec.mount_ns_fd = ns.get();
  absl::StatusOr<RunOutcome> out = TimedRun(spec);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(Succeeded(*out)) << "the command did not see the namespace's tmpfs";

  struct stat st;
  EXPECT_NE(::stat((dir + "/marker").c_str(), &st), 0) << "the test process is still inside";
  char after[4096];
  ASSERT_NE(::getcwd(after, sizeof(after)), nullptr);
  EXPECT_STREQ(before, after);
  ::rmdir(dir.c_str());
}

TEST(FindInPathTest, FindsAnExecutableOnPathAndNothingElse) {
  EXPECT_EQ(FindInPath("sh").substr(FindInPath("sh").rfind('/')), "/sh");
  EXPECT_EQ(::access(FindInPath("sh").c_str(), X_OK), 0);
  EXPECT_EQ(FindInPath("no-such-program-for-moat"), "");
}

}  // namespace
}  // namespace moat::bench
