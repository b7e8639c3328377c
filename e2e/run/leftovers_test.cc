// Nothing outlives a run: background jobs, nohup, setsid and double-forked daemons die with the
// sandbox whether the command exits, times out, or moat itself is interrupted or killed; and the
// run's cgroups are removed; and no mount the sandbox makes reaches the host's mount table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;

// Starts five kinds of long-lived descendants, each a `sleep 300.<digits><n>`, then `tail`.
std::string DaemonScript(const std::string& digits, absl::string_view tail) {
  return absl::StrCat("trap '' HUP TERM INT\n",                             //
                      "sleep 300.", digits, "1 &\n",                        // background job
                      "nohup sleep 300.", digits, "2 >/dev/null 2>&1 &\n",  // nohup
                      "setsid sleep 300.", digits, "3 &\n",                 // new session
                      "(sleep 300.", digits, "4 &)\n",                      // double fork, orphaned
                      "(setsid sh -c 'trap \"\" HUP TERM; exec sleep 300.",
                      digits,                                // daemon: session + fork
                      "5' </dev/null >/dev/null 2>&1 &)\n",  //
                      "echo started\n", tail);
}

std::string Describe(const std::vector<pid_t>& pids) {
  std::string s;
  for (pid_t pid : pids) {
    absl::StrAppend(&s, pid, ": ", CmdlineOf(pid), "\n");
  }
  return s;
}

// Under systemd the host's "/" is a shared mount. A tree moat clones from the host (the egress
// resolv.conf, a workspace) stays in the host's peer group unless made private, and the read-only
// bind the sandbox then makes on top of it propagates back to the host's path: found in the VM
// lane, 8191 mounts stacked on /run/moat/resolv.conf after 13 runs, every run slower. Here, in a
// mount namespace whose "/" is shared, three runs with egress and a workspace leave the mount
// table as it was.
TEST_F(E2eTest, NoMountPropagatesBackToASharedHostRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a mount namespace";
  const std::string policy = dir().Path("egress.yaml");
  WriteFile(policy, "network:\n  allowedDomains: [allowed.test]\n");
  const std::string workspace = dir().Path("workspace");
  MakeDirs(workspace);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_SHARED, nullptr) != 0) {
      ::_exit(3);
    }
    // Mounts outside moat's network-namespace pool: its spares come and go with every run in
    // any namespace (a concurrent test's run claiming a spare unlinks its file, which detaches
    // this namespace's copy of that mount), and are no leak.
    auto mounts = [] {
      std::ifstream in("/proc/self/mountinfo");
      int count = 0;
      for (std::string line; std::getline(in, line);) {
        const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
        if (fields.size() > 4 && !absl::StartsWith(fields[4], "/run/moat/netns/")) ++count;
      }
      return count;
    };
    const auto before = mounts();
    for (int i = 0; i < 3; ++i) {
      MoatResult r = RunPlain({"--policy", policy, "--workspace", workspace}, Sh("true"));
      if (r.exit_code != 0) ::_exit(4);
    }
    ::_exit(mounts() == before ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 3) << "could not make a mount namespace with a shared /";
  EXPECT_NE(WEXITSTATUS(status), 4) << "moat run with egress and a workspace failed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the runs left mounts in the host's mount table";
}

TEST_F(E2eTest, DaemonsDieWhenTheCommandExits) {
  const std::string digits = UniqueDigits();
  MoatResult raw;
  nlohmann::json r =
      RunJson({"--wall-timeout", "20s"}, Sh(DaemonScript(digits, "exit 0\n")), {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "exited") << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("started")) << Describe(r);
  EXPECT_LT(raw.seconds, Scaled(4)) << "moat waited for the daemons instead of ending the run";
  std::vector<pid_t> left = PidsWithMarker(digits);
  EXPECT_TRUE(left.empty()) << "ATTACK SUCCEEDED: processes outlived the run:\n" << Describe(left);
  EXPECT_TRUE(CgroupDirsOf(raw.pid).empty()) << absl::StrJoin(CgroupDirsOf(raw.pid), " ");
}

TEST_F(E2eTest, DaemonsDieAtTheWallTimeout) {
  const std::string digits = UniqueDigits();
  MoatResult raw;
  nlohmann::json r =
      RunJson({"--wall-timeout", "500ms"}, Sh(DaemonScript(digits, "sleep 30\n")), {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "wall_timeout") << Describe(r);
  std::vector<pid_t> left = PidsWithMarker(digits);
  EXPECT_TRUE(left.empty()) << "ATTACK SUCCEEDED: processes outlived the run:\n" << Describe(left);
  EXPECT_TRUE(CgroupDirsOf(raw.pid).empty()) << absl::StrJoin(CgroupDirsOf(raw.pid), " ");
}

TEST_F(E2eTest, NoCgroupIsLeftAfterOomOrCpuTimeout) {
  MoatResult oom;
  RunJson({"--memory", "24M"}, {Attack("mem_bomb")}, {}, &oom);
  EXPECT_TRUE(CgroupDirsOf(oom.pid).empty()) << absl::StrJoin(CgroupDirsOf(oom.pid), " ");
  MoatResult cpu;
  RunJson({"--cpu-timeout", "100ms"}, Sh("while :; do :; done"), {}, &cpu);
  EXPECT_TRUE(CgroupDirsOf(cpu.pid).empty()) << absl::StrJoin(CgroupDirsOf(cpu.pid), " ");
}

// Waits until the five daemons of DaemonScript run on the host.
bool DaemonsRunning(const std::string& digits) {
  return Eventually(
      [&] {
        int found = 0;
        for (int n = 1; n <= 5; ++n) {
          for (pid_t pid : PidsWithMarker(absl::StrCat(digits, n))) {
            std::string cmdline = CmdlineOf(pid);
            if (cmdline.rfind("sleep", 0) == 0) {
              ++found;
              break;
            }
          }
        }
        return found == 5;
      },
      10);
}

TEST_F(E2eTest, InterruptingMoatEndsTheSandbox) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string digits = UniqueDigits();
    MoatProcess moat({"run", "--json", "--", "/bin/sh", "-c", DaemonScript(digits, "sleep 30\n")},
                     {});
    ASSERT_TRUE(DaemonsRunning(digits)) << "the daemons never started";
    double sent = NowSeconds();
    ::kill(moat.pid(), sig);
    MoatResult r = moat.Wait();
    EXPECT_LT(NowSeconds() - sent, Scaled(3)) << "moat did not stop promptly";
    EXPECT_EQ(r.exit_code, 0) << "with --json moat still reports the (cancelled) run\n" << r.err;
    EXPECT_THAT(r.out, HasSubstr("cancelled")) << r.out;
    std::vector<pid_t> left = PidsWithMarker(digits);
    EXPECT_TRUE(left.empty()) << "processes outlived moat:\n" << Describe(left);
    EXPECT_TRUE(CgroupDirsOf(r.pid).empty()) << absl::StrJoin(CgroupDirsOf(r.pid), " ");
  }
}

TEST_F(E2eTest, KillingMoatKillsTheSandbox) {
  const std::string digits = UniqueDigits();
  MoatProcess moat({"run", "--", "/bin/sh", "-c", DaemonScript(digits, "sleep 30\n")}, {});
  ASSERT_TRUE(DaemonsRunning(digits)) << "the daemons never started";
  const pid_t moat_pid = moat.pid();
  ::kill(moat_pid, SIGKILL);
  moat.Wait();
  // The sandbox's init dies with its parent (PR_SET_PDEATHSIG), and with it the pid namespace.
  bool gone = Eventually([&] { return PidsWithMarker(digits).empty(); }, 3);
  EXPECT_TRUE(gone) << "ATTACK SUCCEEDED: the sandbox outlived a killed moat, unsupervised (no "
                       "wall or CPU timeout any more):\n"
                    << Describe(PidsWithMarker(digits));
  if (!gone) {  // clean up what this test started, by pid
    for (pid_t pid : PidsWithMarker(digits)) ::kill(pid, SIGKILL);
    Eventually([&] { return PidsWithMarker(digits).empty(); }, 5);
  }

  // A killed moat cannot remove its cgroups; the next run is expected to clean up after it
  // (cgroup.h: CleanupStaleCgroups removes cgroups whose creator is gone).
  RunJson({}, {"/bin/true"});
  std::vector<std::string> stale = CgroupDirsOf(moat_pid);
  EXPECT_TRUE(stale.empty()) << "cgroups of the killed run are still there after another run: "
                             << absl::StrJoin(stale, " ");
  for (const std::string& dir : stale) ::rmdir(dir.c_str());  // keep the host clean
}

}  // namespace
}  // namespace moat::e2e
