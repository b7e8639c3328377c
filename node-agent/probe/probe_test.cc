// The real moat-probe against a real sandbox-like child: new user, pid and mount namespaces and
// a cgroup of its own, watched by the agent's ProbeMonitor over a pipe. Needs root (cgroups).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "node-agent/probe/probe_monitor.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/seccomp/seccomp_filter.h"
#include "util/clock.h"
#include "util/self_path.h"
#include "util/unique_fd.h"

namespace moat::agent {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kInterval = absl::Milliseconds(100);
constexpr uint64_t kMemoryMax = 64 << 20;

std::string ProbeBinary() {
  if (const char* env = std::getenv("MOAT_PROBE_BIN")) return env;
  return BesideThisProgram("../bin/moat-probe");  // build/tests/probe_test -> build/bin
}

// The sandboxed child's commands, one byte each; it answers each with one byte.
constexpr char kMount = 'm';     // mount a tmpfs on /tmp (in its own mount namespace)
constexpr char kAllocate = 'a';  // touch 60 MiB of anonymous memory
constexpr char kTouch = 't';     // touch 1 MiB
constexpr char kBurn = 'c';      // spin on the CPU until killed
constexpr char kFilter = 'f';    // install the notifying seccomp filter; answer its listener fd

// Only raw system calls here: the parent may have threads, so no locks may be taken.
[[noreturn]] void ChildMain(int commands, int answers, const struct sock_fprog* filter) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(10);
  char c = 'r';
  if (::write(answers, &c, 1) != 1) _exit(11);
  while (::read(commands, &c, 1) == 1) {
    char answer = 'k';
    if (c == kMount) {
      if (::mount("probe-test", "/tmp", "tmpfs", 0, "size=1m") != 0) answer = 'e';
    } else if (c == kAllocate || c == kTouch) {
      const size_t size = c == kAllocate ? 60 << 20 : 1 << 20;
      void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        answer = 'e';
      } else {
        std::memset(p, 1, size);
      }
    } else if (c == kFilter) {
      const int listener = sandbox::InstallSeccompProgram(filter, /*want_listener=*/true);
      answer = listener >= 0 && listener < 128 ? static_cast<char>(listener) : 'e';
    } else if (c == kBurn) {
      (void)!::write(answers, &answer, 1);
      volatile uint64_t spins = 0;
      while (true) spins = spins + 1;
    }
    if (::write(answers, &answer, 1) != 1) _exit(12);
  }
  _exit(0);
}

class Recorder {
 public:
  ProbeCallbacks Callbacks() {
    return {
        .on_event =
            [this](const std::string&, const ProbeEvent& event) {
              absl::MutexLock lock(&mu_);
              events_.push_back(event);
            },
        .on_compromised =
            [this](const std::string&, const std::string& reason) {
              absl::MutexLock lock(&mu_);
              compromised_.push_back(reason);
              compromised_at_ = absl::Now();
            },
        .on_heartbeat_missed =
            [this](const std::string&) {
              absl::MutexLock lock(&mu_);
              ++misses_;
            },
    };
  }

  template <typename F>
  bool Await(F done, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }

  // The first event of this type and kind, once it arrived (empty type: any kind).
  // The last event of `type` and `kind` whose detail contains `detail_part`.
  std::optional<ProbeEvent> AwaitEvent(ProbeEvent::Type type, const std::string& kind,
                                       const std::string& detail_part = "") {
    std::optional<ProbeEvent> found;
    Await([&] {
      for (const auto& e : events_) {
        if (e.type == type && (kind.empty() || e.kind == kind) &&
            absl::StrContains(e.detail, detail_part)) {
          found = e;
        }
      }
      return found.has_value();
    });
    return found;
  }

  absl::Mutex mu_;
  std::vector<ProbeEvent> events_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> compromised_ ABSL_GUARDED_BY(mu_);
  absl::Time compromised_at_ ABSL_GUARDED_BY(mu_);
  int misses_ ABSL_GUARDED_BY(mu_) = 0;
};

class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test makes a cgroup";
    ::signal(SIGPIPE, SIG_IGN);
    auto layout = sandbox::DetectCgroupLayout();
    ASSERT_TRUE(layout.ok()) << layout.status();
    static int counter = 0;
    auto cgroup =
        sandbox::Cgroup::Create(*layout, absl::StrCat(::getpid(), "-probe-test-", ++counter),
                                {.memory_bytes = kMemoryMax, .pids = 64, .cpus = 1});
    ASSERT_TRUE(cgroup.ok()) << cgroup.status();
    cgroup_ = std::move(*cgroup);
    // Built before the clone: the child may only make raw system calls.
    auto filter = sandbox::SeccompProgram::Build({.notify_violations = true});
    ASSERT_TRUE(filter.ok()) << filter.status();
    filter_.emplace(*std::move(filter));
    StartChild();
  }

  void TearDown() override {
    if (probe_pid_ > 0) {
      ::kill(probe_pid_, SIGKILL);
      ::waitpid(probe_pid_, nullptr, 0);
    }
    monitor_.reset();
    if (child_pid_ > 0) {
      ::kill(child_pid_, SIGKILL);
      ::waitpid(child_pid_, nullptr, 0);
    }
    if (cgroup_) {
      EXPECT_TRUE(cgroup_->Destroy().ok());
    }
  }

  void StartChild() {
    int commands[2], answers[2];
    ASSERT_EQ(::pipe2(commands, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(answers, O_CLOEXEC), 0);
    // A fork with new namespaces: the child is init of its own pid namespace.
    const long pid = ::syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | SIGCHLD,
                               nullptr, nullptr, nullptr, nullptr);
    if (pid == 0) {
      // Its copies of our ends would keep it from ever seeing end of file.
      ::close(commands[1]);
      ::close(answers[0]);
      ChildMain(commands[0], answers[1], filter_->fprog());
    }
    ASSERT_GT(pid, 0) << std::strerror(errno);
    child_pid_ = static_cast<pid_t>(pid);
    ::close(commands[0]);
    ::close(answers[1]);
    commands_.reset(commands[1]);
    answers_.reset(answers[0]);
    ASSERT_TRUE(cgroup_->AddProcess(child_pid_).ok());
    ASSERT_EQ(Answer(), 'r');
  }

  char Answer() {
    char c = 0;
    return ::read(answers_.get(), &c, 1) == 1 ? c : 0;
  }
  char Command(char c) {
    if (::write(commands_.get(), &c, 1) != 1) return 0;
    return Answer();
  }

  // Starts moat-probe on the child and watches it with a ProbeMonitor.
  // `seccomp_fd`, if given, becomes the probe's fd 5.
  void StartProbe(std::vector<std::string> extra_flags = {}, int seccomp_fd = -1) {
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child_pid_, 0)));
    ASSERT_TRUE(pidfd.valid());
    int report[2];
    ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
    std::vector<std::string> args = {ProbeBinary(),
                                     "--pidfd-fd=3",
                                     "--report-fd=4",
                                     "--sandbox-id=probe-test",
                                     absl::StrCat("--interval=", absl::FormatDuration(kInterval)),
                                     absl::StrCat("--memory-max=", kMemoryMax),
                                     "--pids-max=64",
                                     "--expected-mounts-from-start"};
    for (const std::string& dir : cgroup_->paths()) args.push_back("--cgroup-dir=" + dir);
    if (seccomp_fd >= 0) args.push_back("--seccomp-fd=5");
    for (std::string& flag : extra_flags) args.push_back(std::move(flag));
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);

    const pid_t pid = ::fork();
    if (pid == 0) {
      // Above 4 first, so that neither dup2 overwrites the other's source.
      const int p = ::fcntl(pidfd.get(), F_DUPFD, 10);
      const int r = ::fcntl(report[1], F_DUPFD, 10);
      const int f = seccomp_fd >= 0 ? ::fcntl(seccomp_fd, F_DUPFD, 10) : -1;
      if (p < 0 || r < 0 || ::dup2(p, 3) != 3 || ::dup2(r, 4) != 4) _exit(120);
      if (f >= 0 && ::dup2(f, 5) != 5) _exit(121);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    ASSERT_GT(pid, 0);
    probe_pid_ = pid;
    ::close(report[1]);
    auto monitor =
        ProbeMonitor::Create({.interval = kInterval, .misses = 3}, recorder_.Callbacks(), &clock_);
    ASSERT_TRUE(monitor.ok()) << monitor.status();
    monitor_ = std::move(*monitor);
    ASSERT_TRUE(monitor_->Watch("probe-test", UniqueFd(report[0]), probe_pid_).ok());
  }

  // Waits for the n-th heartbeat after now; returns it. Heartbeats call no callback, so this
  // polls the monitor (the condition, not the time, ends the wait).
  ProbeHeartbeat AwaitHeartbeats(int n) {
    ProbeHeartbeat last = *monitor_->LastHeartbeat("probe-test");
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (int i = 0; i < n; ++i) {
      const absl::Time seen = last.received;
      while (last.received == seen && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(5));
        last = *monitor_->LastHeartbeat("probe-test");
      }
      EXPECT_GT(last.received, seen) << "no heartbeat " << i;
    }
    return last;
  }

  RealClock clock_;
  Recorder recorder_;
  std::unique_ptr<sandbox::Cgroup> cgroup_;
  std::optional<sandbox::SeccompProgram> filter_;
  // After the sandbox is gone: the probe reports its exit, exits 0, and called nothing a
  // compromise.
  void ExpectProbeExitsCleanly() {
    ASSERT_TRUE(recorder_.AwaitEvent(ProbeEvent::Type::kExited, "").has_value());
    int status = 0;
    ASSERT_EQ(::waitpid(probe_pid_, &status, 0), probe_pid_);
    probe_pid_ = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    absl::MutexLock lock(&recorder_.mu_);
    EXPECT_TRUE(recorder_.compromised_.empty());
  }

  pid_t child_pid_ = -1;
  pid_t probe_pid_ = -1;
  UniqueFd commands_;
  UniqueFd answers_;
  std::unique_ptr<ProbeMonitor> monitor_;
};

TEST_F(ProbeTest, HeartbeatsCarryTheCgroupFigures) {
  // Pages the child touched before it joined the cgroup stay charged elsewhere (v1).
  ASSERT_EQ(Command(kTouch), 'k');
  StartProbe();
  const ProbeHeartbeat hb = AwaitHeartbeats(3);
  EXPECT_EQ(hb.processes, 1);
  EXPECT_GE(hb.tasks, 1u);
  EXPECT_GE(hb.memory_bytes, 1u << 20);
  absl::MutexLock lock(&recorder_.mu_);
  EXPECT_TRUE(recorder_.compromised_.empty());
  EXPECT_EQ(recorder_.misses_, 0);
}

TEST_F(ProbeTest, StoppedProbeIsCompromisedAfterThreeIntervals) {
  StartProbe();
  AwaitHeartbeats(1);
  ASSERT_EQ(::kill(probe_pid_, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(recorder_.Await([&] { return !recorder_.compromised_.empty(); }));
  absl::MutexLock lock(&recorder_.mu_);
  const absl::Duration after = recorder_.compromised_at_ - stopped;
  // The last heartbeat came at most one interval before the stop; compromise is declared
  // 3 intervals + half an interval of grace after it.
  EXPECT_GE(after, 2.5 * kInterval - absl::Milliseconds(20));
  EXPECT_LT(after, 3.5 * kInterval + absl::Seconds(1));  // a loaded machine's latency
  EXPECT_EQ(recorder_.misses_, 3);
  EXPECT_THAT(recorder_.compromised_[0], HasSubstr("no heartbeat"));
}

TEST_F(ProbeTest, AMountMadeAfterStartIsAViolation) {
  StartProbe();
  AwaitHeartbeats(1);  // the probe has its baseline
  ASSERT_EQ(Command(kMount), 'k');
  // The child's table is a copy of the host's, which changes under it as other tests run (a
  // moat run that takes a pooled network namespace unmounts it everywhere): look for this mount.
  auto event = recorder_.AwaitEvent(ProbeEvent::Type::kViolation, "mount", "probe-test");
  ASSERT_TRUE(event.has_value());
  EXPECT_THAT(event->detail, HasSubstr("appeared"));
  EXPECT_THAT(event->detail, HasSubstr("/tmp"));
  EXPECT_THAT(event->detail, HasSubstr("probe-test"));
}

TEST_F(ProbeTest, ForbiddenSyscallsAreAnsweredAndReported) {
  const char listener = Command(kFilter);
  ASSERT_NE(listener, 'e');
  // The listener is the child's; the probe gets a copy, as the backend's would over SCM_RIGHTS.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child_pid_, 0)));
  UniqueFd copy(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), listener, 0)));
  ASSERT_TRUE(copy.valid()) << std::strerror(errno);
  StartProbe({}, copy.get());
  AwaitHeartbeats(1);
  // mount waits in the kernel until the probe answers it (EPERM), so the child answers 'e'.
  ASSERT_EQ(Command(kMount), 'e');
  auto event = recorder_.AwaitEvent(ProbeEvent::Type::kViolation, "syscall");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->detail, "mount");
}

TEST_F(ProbeTest, MemoryNearItsLimitIsReportedOnce) {
  StartProbe();
  AwaitHeartbeats(1);
  ASSERT_EQ(Command(kAllocate), 'k');
  auto event = recorder_.AwaitEvent(ProbeEvent::Type::kNearLimit, "memory");
  ASSERT_TRUE(event.has_value());
  EXPECT_GE(event->value, 0.9 * kMemoryMax);
  EXPECT_EQ(event->limit, kMemoryMax);
  AwaitHeartbeats(3);  // still near: no second event
  absl::MutexLock lock(&recorder_.mu_);
  int near = 0;
  for (const auto& e : recorder_.events_) near += e.type == ProbeEvent::Type::kNearLimit;
  EXPECT_EQ(near, 1);
}

TEST_F(ProbeTest, CpuBudgetExceededKillsTheSandbox) {
  StartProbe({"--cpu-seconds-max=0.3"});
  AwaitHeartbeats(1);
  ASSERT_EQ(Command(kBurn), 'k');
  auto killed = recorder_.AwaitEvent(ProbeEvent::Type::kKilled, "cpu");
  ASSERT_TRUE(killed.has_value());
  EXPECT_GT(killed->value, 0.3);
  int status = 0;
  ASSERT_EQ(::waitpid(child_pid_, &status, 0), child_pid_);
  child_pid_ = -1;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ExpectProbeExitsCleanly();
}

TEST_F(ProbeTest, ProbeEndsWhenTheSandboxExits) {
  StartProbe();
  AwaitHeartbeats(1);
  commands_.reset();  // the child exits on end of file
  int status = 0;
  ASSERT_EQ(::waitpid(child_pid_, &status, 0), child_pid_);
  child_pid_ = -1;
  ExpectProbeExitsCleanly();
}

}  // namespace
}  // namespace moat::agent
