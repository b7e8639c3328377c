// Library-level tests of Runner: real sandboxes, so they need root (CI runs as root).
#include "sandbox/runner.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sandbox/host_view.h"
#include "sandbox/testing/loopback_origin.h"

namespace moat::sandbox {
namespace {

using ::testing::HasSubstr;

class RunnerTest : public ::testing::Test {
 public:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "real sandboxes need root (cgroups)";
    absl::StatusOr<std::unique_ptr<Runner>> runner = Runner::Create();
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
  }

  RunRequest Request(std::vector<std::string> argv) {
    RunRequest r;
    r.argv = std::move(argv);
    HostContext host;
    host.home = "/nonexistent-home";
    absl::StatusOr<MountOptions> mounts = MountOptionsFor(Policy{}, host, std::nullopt);
    EXPECT_TRUE(mounts.ok()) << mounts.status();
    r.mounts = *mounts;
    r.limits.wall_timeout = absl::Seconds(20);
    return r;
  }

  std::unique_ptr<Runner> runner_;
};

TEST_F(RunnerTest, ReportsExitCodeAndCleanedOutput) {
  absl::StatusOr<RunResult> r =
      runner_->Run(Request({"/bin/sh", "-c", "printf 'out\\033[31m!'; echo err >&2; exit 7"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kExited);
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_FALSE(r->signal.has_value());
  EXPECT_EQ(r->stdout_text.text, "out!");
  EXPECT_EQ(r->stderr_text.text, "err\n");
  EXPECT_GT(r->wall_seconds, 0);
}

TEST_F(RunnerTest, ReportsTheKillingSignal) {
  absl::StatusOr<RunResult> r = runner_->Run(Request({"/bin/sh", "-c", "kill -SEGV $$"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kSignaled);
  EXPECT_EQ(r->signal, SIGSEGV);
  EXPECT_FALSE(r->exit_code.has_value());
}

TEST_F(RunnerTest, MissingCommandIs127WithAMessage) {
  absl::StatusOr<RunResult> r = runner_->Run(Request({"no-such-command-moat"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 127);
  EXPECT_THAT(r->stderr_text.text, HasSubstr("cannot execute \"no-such-command-moat\""));
}

TEST_F(RunnerTest, SearchesThePathAndSetsTheEnvironment) {
  RunRequest req = Request({"sh", "-c", "echo $PATH; echo $MOAT_TEST_VAR; pwd; echo $HOME"});
  req.env = {{"MOAT_TEST_VAR", "hello"}};
  absl::StatusOr<RunResult> r = runner_->Run(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(
      r->stdout_text.text,
      "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nhello\n/workspace\n/tmp\n");
}

TEST_F(RunnerTest, WallTimeoutKillsAndReturnsPromptly) {
  RunRequest req = Request({"/bin/sleep", "30"});
  req.limits.wall_timeout = absl::Milliseconds(300);
  absl::Time start = absl::Now();
  absl::StatusOr<RunResult> r = runner_->Run(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kWallTimeout);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(RunnerTest, CpuTimeoutComesFromTheCgroup) {
  RunRequest req = Request({"/bin/sh", "-c", "while :; do :; done"});
  req.limits.cpu_timeout = absl::Milliseconds(300);
  absl::StatusOr<RunResult> r = runner_->Run(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kCpuTimeout);
  EXPECT_GE(r->cpu_seconds, 0.3);
  EXPECT_LT(r->cpu_seconds, 2.0);
}

// The OOM killer's victim is the shell's child: the shell exits 137 itself, and the run still
// ended by OOM. A run that survives an OOM kill (exit 0) stays "exited".
TEST_F(RunnerTest, AShellWhoseChildIsOomKilledEndsOomKilled) {
  const std::string hog =
      "/usr/bin/python3 -c 'b = bytearray(96 << 20); b[::4096] = b\"x\" * len(b[::4096])'";
  RunRequest req = Request({"/bin/sh", "-c", hog + "; exit $?"});
  req.limits.memory_bytes = 32 << 20;
  absl::StatusOr<RunResult> r = runner_->Run(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kOomKilled);
  EXPECT_EQ(r->exit_code, 128 + SIGKILL);

  req = Request({"/bin/sh", "-c", hog + "; exit 0"});
  req.limits.memory_bytes = 32 << 20;
  r = runner_->Run(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kExited);
}

// Runs after one that hit every limit: with cgroup v1 they get its cgroup back (cgroup_spares.h),
// and nothing of that run may show in theirs.
TEST_F(RunnerTest, NothingOfARunThatHitTheLimitsShowsInTheNext) {
  // Forks until the pids limit refuses one, then grows past the memory limit.
  RunRequest bomb = Request({"/usr/bin/python3", "-c",
                             "import os, signal\n"
                             "try:\n"
                             "  while True:\n"
                             "    if os.fork() == 0: signal.pause()\n"
                             "except OSError: pass\n"
                             "b = bytearray(64 << 20)\n"
                             "b[::4096] = b'x' * len(b[::4096])\n"});
  bomb.limits.memory_bytes = 32 << 20;
  bomb.limits.pids = 16;
  bomb.limits.cpu_timeout = absl::Seconds(10);
  absl::StatusOr<RunResult> first = runner_->Run(bomb);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->status, RunStatus::kOomKilled);
  auto has = [](const RunResult& r, const std::string& kind) {
    return std::any_of(r.violations.begin(), r.violations.end(),
                       [&](const Violation& v) { return v.kind == kind; });
  };
  EXPECT_TRUE(has(*first, "memory"));
  EXPECT_TRUE(has(*first, "pids"));
  EXPECT_GE(first->peak_memory_bytes, 16u << 20);

  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<RunResult> next = runner_->Run(Request({"/bin/true"}));
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->status, RunStatus::kExited);
    EXPECT_FALSE(has(*next, "memory")) << "an OOM kill of an earlier run";
    EXPECT_FALSE(has(*next, "pids")) << "refused forks of an earlier run";
    EXPECT_LT(next->peak_memory_bytes, 8u << 20) << "the earlier run's peak";
    EXPECT_LT(next->cpu_seconds, first->cpu_seconds);
  }
}

// The root's layout: what is writable and what is not, the devices work, and /run is empty.
TEST_F(RunnerTest, TheRootIsReadOnlyButForItsPrivateAreas) {
  const std::string script =
      "for p in /tmp/a /workspace/a /dev/shm/a /usr/a /a /run/a /dev/a /proc/acpi/a; do\n"
      "  (echo x > $p) 2>/dev/null && echo \"$p writable\" || echo \"$p read-only\"\n"
      "done\n"
      "echo hi > /dev/null && head -c 4 /dev/zero | wc -c\n"
      "ls -A /run | wc -l\n"
      "stat -c '%n %a' /dev /dev/shm /run\n";
  absl::StatusOr<RunResult> r = runner_->Run(Request({"/bin/sh", "-c", script}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kExited) << r->stderr_text.text;
  EXPECT_EQ(r->stdout_text.text,
            "/tmp/a writable\n/workspace/a writable\n/dev/shm/a writable\n/usr/a read-only\n"
            "/a read-only\n/run/a read-only\n/dev/a read-only\n/proc/acpi/a read-only\n4\n0\n"
            "/dev 755\n/dev/shm 1777\n/run 755\n")
      << r->stderr_text.text;
}

// Regression: with a second thread in the supervisor, the cloned child used to hang in glibc's
// setxid broadcast (it waited for threads that do not exist in the child).
TEST_F(RunnerTest, WorksFromAMultiThreadedSupervisor) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 3; ++i) {
    busy.emplace_back([&] {
      while (!stop.load()) {
        std::vector<char> churn(4096);  // keeps malloc's locks busy
        (void)churn;
      }
    });
  }
  for (int i = 0; i < 10; ++i) {
    RunRequest req = Request({"/bin/true"});
    req.limits.wall_timeout = absl::Seconds(10);
    absl::StatusOr<RunResult> r = runner_->Run(req);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 0);
  }
  stop = true;
  for (std::thread& t : busy) t.join();
}

// A project in a writable host directory (owned by `owner`, with a .git) whose command writes
// its work and tries to make two protected names (.vscode, .git/config): what the run and the
// directory show. Checks what both forms share: the work lands, the names are refused at the
// moment the sandbox tries, and both refusals are reported.
struct ProjectRun {
  std::string dir;
  uid_t out_owner = static_cast<uid_t>(-1);  // the owner of the work file on the host
};

void RunProtectedProject(RunnerTest* test, Runner& runner, uid_t owner, ProjectRun* out) {
  char tmpl[] = "/tmp/moat-runner-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  out->dir = tmpl;
  const std::string& dir = out->dir;
  ASSERT_EQ(::mkdir((dir + "/.git").c_str(), 0755), 0);
  ASSERT_EQ(::chown(dir.c_str(), owner, owner), 0);
  ASSERT_EQ(::chown((dir + "/.git").c_str(), owner, owner), 0);
  RunRequest req =
      test->Request({"/bin/sh", "-c",
                     "cd " + dir +
                         " && echo data > out.txt && mkdir sub && : > sub/f; mkdir .vscode; "
                         "echo y > .git/config; ls -A .git; test -e .vscode || echo done"});
  Policy policy;
  policy.allow_write = {dir};
  policy.deny_write = {dir + "/.vscode", dir + "/.git/config"};
  HostContext host;
  host.home = "/nonexistent-home";
  absl::StatusOr<MountOptions> mounts = MountOptionsFor(policy, host, std::nullopt);
  ASSERT_TRUE(mounts.ok()) << mounts.status();
  req.mounts = *mounts;
  absl::StatusOr<RunResult> r = runner.Run(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_text.text, "done\n") << r->stderr_text.text;
  EXPECT_THAT(r->stderr_text.text, HasSubstr("Read-only file system"));
  struct stat st;
  ASSERT_EQ(::stat((dir + "/out.txt").c_str(), &st), 0);
  out->out_owner = st.st_uid;
  EXPECT_EQ(::stat((dir + "/sub/f").c_str(), &st), 0);
  EXPECT_NE(::lstat((dir + "/.vscode").c_str(), &st), 0);
  EXPECT_NE(::lstat((dir + "/.git/config").c_str(), &st), 0);
  int reported = 0;
  for (const Violation& v : r->violations) {
    if (v.kind == "filesystem" && absl::StrContains(v.detail, "refused to create")) ++reported;
  }
  EXPECT_EQ(reported, 2);
}

// A writable host directory owned by host root (not the sandbox's uid) is idmapped: the sandbox
// can write, and files land owned by the directory's owner.
TEST_F(RunnerTest, WritableHostPathIsIdmappedAndProtectedPathsCannotBeMade) {
  ProjectRun run;
  RunProtectedProject(this, *runner_, 0, &run);
  EXPECT_EQ(run.out_owner, 0u);  // stored as the directory's owner, through the idmap
  std::system(("rm -rf '" + run.dir + "'").c_str());
}

// A runner with the forms an ordinary user's run takes, as root.
std::unique_ptr<Runner> RootlessFormsRunner() {
  RunnerOptions options;
  options.rootless_forms = true;
  options.netns_pool_dir = "";
  absl::StatusOr<std::unique_ptr<Runner>> rootless = Runner::Create(options);
  EXPECT_TRUE(rootless.ok()) << rootless.status();
  return rootless.ok() ? *std::move(rootless) : nullptr;
}

// The forms an ordinary user's run takes, as root: the child clones the writable host path
// itself (under /tmp, which its staging tmpfs covers later), and the creation guard is a process
// in the sandbox's user namespace. Writes land (not idmapped: the directory is the sandbox's
// host uid's), protected names are refused at creation and reported over the guard's socket.
TEST_F(RunnerTest, RootlessFormsBindHostPathsInTheChildAndGuardFromItsUserNamespace) {
  std::unique_ptr<Runner> rootless = RootlessFormsRunner();
  ASSERT_NE(rootless, nullptr);
  ProjectRun run;
  RunProtectedProject(this, *rootless, 65534, &run);
  EXPECT_EQ(run.out_owner, 65534u);
  std::system(("rm -rf '" + run.dir + "'").c_str());
}

// Descriptors of this process that are sockets bound to an egress listener's port.
int EgressListenersOpen() {
  int n = 0;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir("/proc/self/fd"), ::closedir);
  for (struct dirent* e; d && (e = ::readdir(d.get())) != nullptr;) {
    const int fd = std::atoi(e->d_name);
    struct sockaddr_in sa = {};
    socklen_t len = sizeof(sa);
    if (fd < 3 || ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&sa), &len) != 0 ||
        sa.sin_family != AF_INET) {
      continue;
    }
    const std::vector<egress::ListenerSpec>& specs = egress::EgressSession::Listeners();
    n += std::any_of(specs.begin(), specs.end(), [&](const egress::ListenerSpec& spec) {
      return ntohs(sa.sin_port) == spec.port;
    });
  }
  return n;
}

// An ordinary user's egress, as root: the supervisor never enters the sandbox's network
// namespace; the sandbox's init makes the proxy's and the DNS stub's listeners in it before the
// command exists and hands them over. The command sees the stub in its resolv.conf (written in
// the runtime directory given), an allowed request is answered by the origin, a denied one gets
// 403 and a denied name NXDOMAIN; the audit log and the violations say so, and nothing of the
// session stays open in the supervisor afterwards.
TEST_F(RunnerTest, RootlessFormsServeEgressFromListenersTheSandboxMade) {
  std::unique_ptr<Runner> rootless = RootlessFormsRunner();
  ASSERT_NE(rootless, nullptr);
  egress::testing::LoopbackOrigin origin;
  char tmpl[] = "/tmp/moat-runner-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  // The sandbox's host uid clones the resolv.conf from there, as a user from its runtime dir.
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const std::string script = absl::StrCat(
      "import socket, struct\n"
      "def http(url, host):\n"
      "  s = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
      "  s.sendall(('GET %s HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n'"
      " % (url, host)).encode())\n"
      "  data = b''\n"
      "  while True:\n"
      "    chunk = s.recv(4096)\n"
      "    if not chunk: break\n"
      "    data += chunk\n"
      "  print(data.split(b'\\r\\n')[0].decode(), data.split(b'\\r\\n\\r\\n', 1)[-1].decode())\n"
      "http('http://127.0.0.1:",
      origin.port(), "/allowed', '127.0.0.1:", origin.port(), "')\n",
      "http('http://denied.test/x', 'denied.test')\n"
      "q = struct.pack('>HHHHHH', 7, 0x0100, 1, 0, 0, 0) + b'\\x06denied\\x04test\\x00' + "
      "struct.pack('>HH', 1, 1)\n"
      "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
      "u.settimeout(10)\n"
      "u.sendto(q, ('127.0.0.1', 53))\n"
      "print('dns rcode', u.recv(512)[3] & 15)\n"
      "print([l for l in open('/etc/resolv.conf') if l.startswith('nameserver')])\n");
  RunRequest req = Request({"/usr/bin/python3", "-c", script});
  egress::EgressOptions e;
  e.allowed_domains = {*DomainPattern::Parse("127.0.0.1")};
  e.allowed_cidrs = {*egress::Cidr::Parse("127.0.0.1/32")};
  e.dns_servers = {*egress::ParseDnsServer("127.0.0.1:9")};  // never asked: no name is allowed
  e.audit_log = dir + "/audit.jsonl";
  e.runtime_dir = dir + "/run";
  req.egress = e;
  absl::StatusOr<RunResult> r = rootless->Run(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(EgressListenersOpen(), 0) << "the session left listeners open";
  EXPECT_THAT(r->stdout_text.text, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(r->stdout_text.text, HasSubstr("hello from the origin: GET /allowed"));
  EXPECT_THAT(r->stdout_text.text, HasSubstr("HTTP/1.1 403"));
  EXPECT_THAT(r->stdout_text.text, HasSubstr("dns rcode 3"));
  EXPECT_THAT(r->stdout_text.text, HasSubstr("['nameserver 127.0.0.1\\n']")) << r->stderr_text.text;
  bool denial_reported = false;
  for (const Violation& v : r->violations) {
    denial_reported |= v.kind == "network" && absl::StrContains(v.detail, "denied.test");
  }
  EXPECT_TRUE(denial_reported);
  std::string audit;
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen((dir + "/audit.jsonl").c_str(), "r"),
                                            std::fclose);
    ASSERT_NE(f, nullptr);
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f.get())) > 0;) audit.append(buf, n);
  }
  EXPECT_THAT(audit, HasSubstr("\"allowed\":true"));
  EXPECT_THAT(audit, HasSubstr("\"host\":\"denied.test\""));
  std::system(("rm -rf '" + dir + "'").c_str());
}

// Protection follows the directory, not its name: a sandbox that moves .git away and plants a
// symlink to a host directory in its place gets neither the symlink nor a config in the moved
// directory, and the host directory behind the symlink is never touched.
TEST_F(RunnerTest, ProtectedNamesFollowTheirDirectoryNotItsPath) {
  char tmpl[] = "/tmp/moat-runner-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::string decoy = dir + "-decoy";
  ASSERT_EQ(::mkdir((dir + "/.git").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(decoy.c_str(), 0755), 0);
  RunRequest req = Request(
      {"/bin/sh", "-c",
       "cd " + dir + " && mv .git .git-old && ln -s " + decoy +
           " .git; echo evil > .git-old/config; ln -s x .git-old/hooks; ls -A; ls -A .git-old"});
  Policy policy;
  policy.allow_write = {dir};
  policy.deny_write = {dir + "/.git/config", dir + "/.git/hooks"};
  HostContext host;
  host.home = "/nonexistent-home";
  absl::StatusOr<MountOptions> mounts = MountOptionsFor(policy, host, std::nullopt);
  ASSERT_TRUE(mounts.ok()) << mounts.status();
  req.mounts = *mounts;
  absl::StatusOr<RunResult> r = runner_->Run(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_text.text, ".git-old\n") << r->stderr_text.text;
  struct stat st;
  EXPECT_NE(::lstat((dir + "/.git").c_str(), &st), 0);
  EXPECT_NE(::lstat((dir + "/.git-old/config").c_str(), &st), 0);
  EXPECT_NE(::lstat((dir + "/.git-old/hooks").c_str(), &st), 0);
  EXPECT_NE(::lstat((decoy + "/config").c_str(), &st), 0);
  std::system(("rm -rf '" + dir + "' '" + decoy + "'").c_str());
}

// The command stops reading its stdin while the supervisor still has input for it: the write
// fails with EPIPE, which must not kill the supervisor (SIGPIPE's default action).
TEST_F(RunnerTest, StdinWriteAfterTheCommandExitedDoesNotKillTheSupervisor) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread feeder([fd = fds[1]] {
    sigset_t pipe_only;  // the feeder itself may also outlive its reader
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
    std::string chunk(1 << 16, 'x');
    for (int i = 0; i < 64; ++i) {
      if (::write(fd, chunk.data(), chunk.size()) < 0) break;
    }
    ::close(fd);
  });
  ::signal(SIGPIPE, SIG_DFL);  // as in a library user that never thought about it
  RunRequest req = Request({"/bin/sh", "-c", "head -c 10 >/dev/null; echo read"});
  req.stdin_fd = fds[0];
  absl::StatusOr<RunResult> r = runner_->Run(req);
  ::close(fds[0]);
  feeder.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_text.text, "read\n");
  EXPECT_EQ(r->exit_code, 0);
}

TEST_F(RunnerTest, EmptyCommandIsAnError) {
  absl::StatusOr<RunResult> r = runner_->Run(Request({}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moat::sandbox
