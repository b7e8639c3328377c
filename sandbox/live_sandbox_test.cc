#include "sandbox/live_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/testing/read_to_eof.h"
#include "sandbox/testing/status_matchers.h"

namespace moat::sandbox {
namespace {

using ::moat::sandbox::testing::ReadToEof;

using ::moat::matchers::IsOk;
using ::testing::HasSubstr;

struct Outcome {
  ReaperEvent started = {};
  ReaperEvent exited = {};
  std::string out, err;
};

std::vector<std::string> Env(const LiveSandbox& box) {
  std::vector<std::string> env;
  for (const auto& [name, value] : box.base_env()) env.push_back(absl::StrCat(name, "=", value));
  return env;
}

// Waits for the next event of `box` (up to 10 s).
ReaperEvent NextEvent(LiveSandbox& box) {
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::optional<ReaperEvent>> event = box.ReadEvent();
    EXPECT_TRUE(event.ok()) << event.status();
    if (!event.ok()) return {};
    if (event->has_value()) return **event;
    struct pollfd pfd = {box.event_fd(), POLLIN, 0};
    ::poll(&pfd, 1, 10);
  }
  ADD_FAILURE() << "no event from init";
  return {};
}

Outcome RunIn(LiveSandbox& box, uint32_t seq, std::vector<std::string> argv,
              const std::string& cwd = "/workspace") {
  int out[2], err[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  absl::Status sent = box.SendExec(seq, cwd, argv, Env(box), devnull, out[1], err[1]);
  EXPECT_TRUE(sent.ok()) << sent;
  ::close(devnull);
  ::close(out[1]);
  ::close(err[1]);
  Outcome o;
  std::thread reader([&] { o.err = ReadToEof(err[0]); });
  o.out = ReadToEof(out[0]);
  reader.join();
  ::close(out[0]);
  ::close(err[0]);
  if (!sent.ok()) return o;
  o.started = NextEvent(box);
  EXPECT_EQ(o.started.op, ReaperOp::kStarted);
  EXPECT_EQ(o.started.seq, seq);
  o.exited = NextEvent(box);
  EXPECT_EQ(o.exited.op, ReaperOp::kExited);
  EXPECT_EQ(o.exited.seq, seq);
  return o;
}

class LiveSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "real sandboxes need root";
    absl::StatusOr<std::unique_ptr<SandboxFactory>> factory = SandboxFactory::Create();
    ASSERT_TRUE(factory.ok()) << factory.status();
    factory_ = *std::move(factory);
  }

  std::unique_ptr<LiveSandbox> Start(const std::string& suffix, uint32_t restart_grace_ms = 0) {
    LiveSandboxOptions options;
    options.restart_grace_ms = restart_grace_ms;
    options.name = absl::StrCat(::getpid(), "-live-", suffix);
    options.limits.memory_bytes = 128 << 20;
    options.limits.pids = 64;
    absl::StatusOr<std::unique_ptr<LiveSandbox>> box = factory_->Start(options);
    EXPECT_TRUE(box.ok()) << box.status();
    if (!box.ok()) return nullptr;
    // Nobody answers seccomp notifications here: without a listener the kernel fails the
    // forbidden call with ENOSYS instead of waiting.
    (*box)->TakeSeccompListener();
    return *std::move(box);
  }

  std::unique_ptr<SandboxFactory> factory_;
};

TEST_F(LiveSandboxTest, RunsManyCommandsAndKeepsTheWorkspace) {
  std::unique_ptr<LiveSandbox> box = Start("many");
  ASSERT_NE(box, nullptr);
  Outcome write = RunIn(*box, 1, {"/bin/sh", "-c", "echo kept > /workspace/f; echo written"});
  EXPECT_EQ(write.started.status, 0);
  EXPECT_GT(write.started.pid, 1);  // init is 1 inside
  EXPECT_TRUE(WIFEXITED(write.exited.status));
  EXPECT_EQ(WEXITSTATUS(write.exited.status), 0);
  EXPECT_EQ(write.out, "written\n");
  for (uint32_t seq = 2; seq < 6; ++seq) {
    Outcome read = RunIn(*box, seq, {"cat", "f"});  // relative: cwd is /workspace; PATH search
    EXPECT_EQ(read.out, "kept\n");
    EXPECT_EQ(WEXITSTATUS(read.exited.status), 0);
  }
  Outcome err = RunIn(*box, 9, {"/bin/sh", "-c", "echo oops >&2; exit 3"});
  EXPECT_EQ(err.err, "oops\n");
  EXPECT_EQ(WEXITSTATUS(err.exited.status), 3);
}

TEST_F(LiveSandboxTest, CommandsSeeTheSandboxNotTheHost) {
  std::unique_ptr<LiveSandbox> box = Start("view");
  ASSERT_NE(box, nullptr);
  Outcome id = RunIn(*box, 1, {"/bin/sh", "-c", "id -u; hostname; ls /proc | grep -c '^[0-9]'"});
  // root inside, the sandbox's host name, and only init plus this shell's processes.
  EXPECT_THAT(id.out, ::testing::StartsWith("0\nmoat\n"));
  int pids = std::stoi(id.out.substr(id.out.rfind('\n', id.out.size() - 2) + 1));
  EXPECT_LE(pids, 4);
  Outcome caps = RunIn(*box, 2, {"/bin/sh", "-c", "grep CapEff /proc/self/status"});
  EXPECT_THAT(caps.out, HasSubstr("0000000000000000"));
  Outcome write = RunIn(*box, 3, {"/bin/sh", "-c", "echo x > /etc/moat-test"});
  EXPECT_NE(WEXITSTATUS(write.exited.status), 0);
  struct stat st;
  EXPECT_NE(::stat("/etc/moat-test", &st), 0);
}

TEST_F(LiveSandboxTest, ReportsStartFailures) {
  std::unique_ptr<LiveSandbox> box = Start("fail");
  ASSERT_NE(box, nullptr);
  Outcome missing = RunIn(*box, 1, {"no-such-command-here"});
  EXPECT_EQ(missing.started.status, ENOENT);
  EXPECT_STREQ(missing.started.step, "execve");
  EXPECT_EQ(WEXITSTATUS(missing.exited.status), 127);
  Outcome cwd = RunIn(*box, 2, {"/bin/true"}, "/no/such/dir");
  EXPECT_EQ(cwd.started.status, ENOENT);
  EXPECT_STREQ(cwd.started.step, "change to the working directory");
  // The sandbox still works afterwards.
  Outcome ok = RunIn(*box, 3, {"/bin/true"});
  EXPECT_EQ(ok.started.status, 0);
  EXPECT_EQ(WEXITSTATUS(ok.exited.status), 0);
  EXPECT_FALSE(box->SendExec(4, "relative", {"/bin/true"}, {}, 0, 1, 2).ok());
  EXPECT_FALSE(box->SendExec(4, "/", {}, {}, 0, 1, 2).ok());
  EXPECT_FALSE(box->SendExec(4, "/", {std::string("a\0b", 3)}, {}, 0, 1, 2).ok());
  EXPECT_FALSE(box->SendExec(4, "/", {std::string(200 * 1024, 'x')}, {}, 0, 1, 2).ok());
}

TEST_F(LiveSandboxTest, SignalReachesTheCommandsProcessGroup) {
  std::unique_ptr<LiveSandbox> box = Start("signal");
  ASSERT_NE(box, nullptr);
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  // A shell with a child: both are in the command's process group.
  ASSERT_TRUE(box->SendExec(7, "/", {"/bin/sh", "-c", "sleep 100; echo not-killed"}, Env(*box),
                            out[1], out[1], out[1])
                  .ok());
  ::close(out[1]);
  ReaperEvent started = NextEvent(*box);
  ASSERT_EQ(started.op, ReaperOp::kStarted);
  ASSERT_TRUE(box->SendSignal(7, SIGTERM).ok());
  ReaperEvent exited = NextEvent(*box);
  ASSERT_EQ(exited.op, ReaperOp::kExited);
  EXPECT_TRUE(WIFSIGNALED(exited.status));
  EXPECT_EQ(WTERMSIG(exited.status), SIGTERM);
  EXPECT_EQ(ReadToEof(out[0]), "");  // sleep died too: the pipe closed without output
  ::close(out[0]);
}

TEST_F(LiveSandboxTest, DestroyKillsEverythingAndRemovesTheCgroup) {
  std::unique_ptr<LiveSandbox> box = Start("destroy");
  ASSERT_NE(box, nullptr);
  // A detached background process outlives its command.
  Outcome bg = RunIn(*box, 1, {"/bin/sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"});
  EXPECT_EQ(WEXITSTATUS(bg.exited.status), 0);
  std::vector<std::string> cgroups = box->cgroup().paths();
  ASSERT_FALSE(cgroups.empty());
  EXPECT_TRUE(box->Alive());
  const pid_t init = box->pid();
  LiveSandboxTeardown teardown = box->Destroy();
  EXPECT_GE(teardown.processes_killed, 2);  // init and the sleep
  EXPECT_TRUE(teardown.cgroup_removed);
  EXPECT_TRUE(teardown.residue.empty());
  EXPECT_FALSE(box->Alive());
  EXPECT_NE(::kill(init, 0), 0);
  for (const std::string& path : cgroups) EXPECT_NE(::access(path.c_str(), F_OK), 0) << path;
  EXPECT_FALSE(box->SendExec(2, "/", {"/bin/true"}, {}, 0, 1, 2).ok());
  LiveSandboxTeardown again = box->Destroy();
  EXPECT_EQ(again.processes_killed, 0);
}

TEST_F(LiveSandboxTest, InitEndsWhenTheSupervisorLetsGo) {
  std::unique_ptr<LiveSandbox> box = Start("orphan");
  ASSERT_NE(box, nullptr);
  // Simulates the agent's death: its end of the socket closes. Init must exit by itself.
  int dup = ::fcntl(box->pidfd(), F_DUPFD_CLOEXEC, 0);
  ::shutdown(box->event_fd(), SHUT_RDWR);
  struct pollfd pfd = {dup, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 5000), 1) << "init still runs after the supervisor's socket closed";
  ::close(dup);
}

// With a restart grace, init outlives its supervisor: a command started before goes on, its
// output waits in the pipes init holds, and a new supervisor that takes init's spare socket gets
// the command (exited meanwhile, with its status) and its pipes, and can run new commands.
TEST_F(LiveSandboxTest, WithAGraceInitWaitsForANewSupervisor) {
  std::unique_ptr<LiveSandbox> box = Start("adopt", /*restart_grace_ms=*/10000);
  ASSERT_NE(box, nullptr);
  const pid_t pid = box->pid();
  UniqueFd pidfd(::fcntl(box->pidfd(), F_DUPFD_CLOEXEC, 0));
  const std::vector<std::string> cgroups = box->cgroup().paths();
  int out[2], err[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(err, O_CLOEXEC), 0);
  UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_THAT(box->SendExec(7, "/workspace",
                            {"/bin/sh", "-c", "echo before; sleep 0.5; echo after; exit 4"},
                            Env(*box), devnull.get(), out[1], err[1], out[0], err[0]),
              IsOk());
  ::close(out[1]);
  ::close(err[1]);
  EXPECT_EQ(NextEvent(*box).op, ReaperOp::kStarted);
  // The supervisor goes, with its read ends: init holds its own.
  box->Release();
  ::close(out[0]);
  ::close(err[0]);
  absl::SleepFor(absl::Seconds(1));
  struct pollfd alive = {pidfd.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&alive, 1, 0), 0) << "init ended with its supervisor despite the grace";

  UniqueFd sync(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), kReaperSyncFd, 0)));
  ASSERT_TRUE(sync.valid()) << std::strerror(errno);
  std::vector<AdoptedCommand> commands;
  absl::StatusOr<std::unique_ptr<LiveSandbox>> adopted =
      LiveSandbox::Adopt(pid, std::move(pidfd), std::move(sync), nullptr, UniqueFd(), 10000,
                         absl::Seconds(2), &commands);
  ASSERT_THAT(adopted, IsOk());
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0].seq, 7u);
  EXPECT_TRUE(commands[0].exited);
  EXPECT_TRUE(WIFEXITED(commands[0].wait_status));
  EXPECT_EQ(WEXITSTATUS(commands[0].wait_status), 4);
  ASSERT_TRUE(commands[0].out.valid());
  EXPECT_EQ(ReadToEof(commands[0].out.get()), "before\nafter\n");
  // The new supervisor runs commands as the old one did.
  Outcome next = RunIn(**adopted, 8, {"/bin/sh", "-c", "echo again"});
  EXPECT_EQ(next.out, "again\n");
  (*adopted)->Destroy();
  for (const std::string& dir : cgroups) ::rmdir(dir.c_str());
}

// Nobody takes the sandbox over within the grace: init ends (and the pid namespace with it).
TEST_F(LiveSandboxTest, WithoutANewSupervisorInitEndsAfterTheGrace) {
  std::unique_ptr<LiveSandbox> box = Start("grace", /*restart_grace_ms=*/1000);
  ASSERT_NE(box, nullptr);
  UniqueFd pidfd(::fcntl(box->pidfd(), F_DUPFD_CLOEXEC, 0));
  const std::vector<std::string> cgroups = box->cgroup().paths();
  box->Release();
  struct pollfd pfd = {pidfd.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 300), 0) << "init did not wait for the grace";
  EXPECT_EQ(::poll(&pfd, 1, 5000), 1) << "init still runs after its grace";
  siginfo_t info = {};
  ::waitid(static_cast<idtype_t>(P_PIDFD), pidfd.get(), &info, WEXITED);
  for (const std::string& dir : cgroups) ::rmdir(dir.c_str());
}

TEST_F(LiveSandboxTest, InitIsTheSmallMoatInitAndCannotBeInspected) {
  ASSERT_FALSE(factory_->init_binary().empty()) << "moat-init was not found";
  std::unique_ptr<LiveSandbox> box = Start("init");
  ASSERT_NE(box, nullptr);
  char exe[4096] = {};
  ASSERT_GT(::readlink(absl::StrCat("/proc/", box->pid(), "/exe").c_str(), exe, sizeof(exe) - 1),
            0);
  EXPECT_THAT(std::string(exe), ::testing::EndsWith("/moat-init"));
  // Its page tables are its own small ones, not a copy of this test process's.
  std::ifstream status(absl::StrCat("/proc/", box->pid(), "/status"));
  std::string line;
  long pte_kib = -1;
  while (std::getline(status, line)) {
    if (line.rfind("VmPTE:", 0) == 0) pte_kib = std::stol(line.substr(6));
  }
  EXPECT_GE(pte_kib, 0);
  EXPECT_LE(pte_kib, 64);
  // Commands run as the same uid as init, but init is not dumpable: its memory, environment
  // and executable are out of reach.
  Outcome peek = RunIn(*box, 1,
                       {"/bin/sh", "-c",
                        "cat /proc/1/environ; cat /proc/1/maps; "
                        "readlink /proc/1/exe; echo done"});
  EXPECT_EQ(peek.out, "done\n");
  EXPECT_THAT(peek.err, HasSubstr("Permission denied"));
  // Commands still start and see their environment.
  Outcome env = RunIn(*box, 2, {"/bin/sh", "-c", "echo $HOME"});
  EXPECT_EQ(env.out, "/tmp\n");
}

TEST_F(LiveSandboxTest, AMissingInitProgramIsAnError) {
  EXPECT_EQ(SandboxFactory::Create("/no/such/moat-init").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(LiveSandboxTest, RootComesFromTheGivenDirectory) {
  // A root with no shell in it: the host's /bin/sh must not be reachable.
  char dir[] = "/var/tmp/moat-root-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ASSERT_EQ(::mkdir(absl::StrCat(dir, "/etc").c_str(), 0755), 0);
  LiveSandboxOptions options;
  options.name = absl::StrCat(::getpid(), "-live-root");
  options.mounts.root_dir = dir;
  absl::StatusOr<std::unique_ptr<LiveSandbox>> box = factory_->Start(options);
  ASSERT_TRUE(box.ok()) << box.status();
  (*box)->TakeSeccompListener();
  Outcome sh = RunIn(**box, 1, {"/bin/sh", "-c", "true"});
  EXPECT_EQ(sh.started.status, ENOENT);
  EXPECT_EQ(WEXITSTATUS(sh.exited.status), 127);
  (*box)->Destroy();
  ::rmdir(absl::StrCat(dir, "/etc").c_str());
  EXPECT_EQ(::rmdir(dir), 0);

  options.mounts.root_dir = "/tmp/x";
  EXPECT_EQ(factory_->Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.mounts.root_dir = "/no/such/root";
  EXPECT_FALSE(factory_->Start(options).ok());
}

}  // namespace
}  // namespace moat::sandbox
