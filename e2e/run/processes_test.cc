// Host processes: the sandbox sees only its own (its own pid namespace and /proc), and cannot
// signal anything outside, even with kill(-1) or by guessing pids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(E2eTest, HostProcessesAreInvisibleAndSurviveSignals) {
  HostSleeper sleeper;
  ASSERT_TRUE(ProcessAlive(sleeper.pid()));
  std::string script =
      absl::StrCat("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done\n",
                   "echo \"pids: $(ls /proc | grep -c '^[0-9]')\"\n",
                   // By its host pid, by every guessable pid, and by everyone.
                   // (Quoted apart: the script itself shows up in /proc/*/cmdline.)
                   "kill -9 ", sleeper.pid(), " 2>/dev/null && echo 'ESC''APED kill by host pid'\n",
                   "i=3; while [ $i -lt 400 ]; do kill -9 $i 2>/dev/null; i=$((i+1)); done\n",
                   "kill -9 -1\n", "echo survived\n");
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, HasSubstr("survived")) << Describe(r);
  EXPECT_THAT(out, Not(HasSubstr(sleeper.marker()))) << "ATTACK SUCCEEDED: host process visible\n"
                                                     << Describe(r);
  EXPECT_THAT(out, Not(HasSubstr("ESCAPED"))) << Describe(r);
  // init, the shell, `ls` and `grep` (and at most a few more): nothing of the host.
  std::string count = out.substr(out.rfind("pids: ") + 6);
  int pids = 0;
  ASSERT_TRUE(absl::SimpleAtoi(count.substr(0, count.find('\n')), &pids)) << out;
  EXPECT_GE(pids, 2);
  EXPECT_LE(pids, 6) << out;
  EXPECT_TRUE(ProcessAlive(sleeper.pid())) << "ATTACK SUCCEEDED: the host process was killed";
}

TEST_F(E2eTest, ProcShowsOnlyTheSandboxsProcesses) {
  // Every pid in /proc belongs to the sandbox: its parent chain ends at the sandbox's pid 1.
  std::string script =
      "for p in /proc/[0-9]*; do n=${p#/proc/}; pp=$(awk '/^PPid:/{print $2}' $p/status "
      "2>/dev/null); echo \"pid $n ppid $pp\"; done\n"
      "echo \"self $$ parent $PPID\"\n"
      "head -1 /proc/1/status\n";
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, HasSubstr("pid 1 ppid 0")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("self 2 parent 1")) << "the command is pid 2, under init\n" << out;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (!absl::StartsWith(line, "pid ")) continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    int pid = 0, ppid = -1;
    if (f.size() < 4 || !absl::SimpleAtoi(f[1], &pid) || !absl::SimpleAtoi(f[3], &ppid)) continue;
    EXPECT_LT(pid, 100) << "a pid of the host's numbering is visible: " << line;
    if (pid != 1) {
      EXPECT_GE(ppid, 1) << line;
    }
  }
}

TEST_F(E2eTest, HostSeesSandboxProcessesAsUnprivileged) {
  const std::string digits = UniqueDigits();
  MoatProcess moat({"run", "--", "/bin/sleep", absl::StrCat("3.", digits)}, {});
  pid_t sleeper = -1;
  ASSERT_TRUE(Eventually(
      [&] {
        for (pid_t pid : PidsWithMarker(digits)) {
          std::string cmdline = CmdlineOf(pid);
          if (absl::StartsWith(cmdline, std::string("/bin/sleep\0", 11))) sleeper = pid;
        }
        return sleeper > 0;
      },
      10))
      << "the sandboxed sleep never appeared on the host";
  std::string status = ReadFile(absl::StrCat("/proc/", sleeper, "/status"));
  EXPECT_THAT(status, Not(HasSubstr("Uid:\t0\t"))) << status;
  EXPECT_THAT(status, HasSubstr("Uid:\t65534\t65534\t65534\t65534")) << status;
  EXPECT_THAT(status, HasSubstr("CapEff:\t0000000000000000")) << status;
  EXPECT_THAT(status, HasSubstr("NoNewPrivs:\t1")) << status;
  EXPECT_THAT(status, HasSubstr("Seccomp:\t2")) << status;
  // Its own pid namespace: NSpid shows the host pid and the sandbox pid.
  EXPECT_THAT(status, HasSubstr(absl::StrCat("NSpid:\t", sleeper, "\t2\n"))) << status;
  ::kill(moat.pid(), SIGTERM);  // no need to wait the 3 s
  moat.Wait();
}

}  // namespace
}  // namespace moat::e2e
