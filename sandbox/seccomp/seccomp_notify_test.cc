#include "sandbox/seccomp/seccomp_notify.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "sandbox/seccomp/seccomp_filter.h"
#include "util/fd_passing.h"
#include "util/unique_fd.h"

namespace moat::sandbox {
namespace {

UniqueFd ReceiveFd(int sock) { return UniqueFd(moat::ReceiveFd(sock, 'f')); }

// Waits until `fd` is readable; false on timeout, so a broken filter fails the test instead of
// hanging it.
bool WaitReadable(int fd, int timeout_ms = 10000) {
  struct pollfd pfd = {fd, POLLIN, 0};
  return poll(&pfd, 1, timeout_ms) == 1 && (pfd.revents & POLLIN);
}

// A sandboxed child: installs the notifying program with a listener, hands the listener to the
// parent over `sock`, closes its copy, then runs `body` and reports each call's errno (or 0)
// back over `sock` as ints.
class NotifyingChild {
 public:
  template <typename Body>
  static NotifyingChild Start(const SeccompProgram& program, Body body) {
    int socks[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, socks), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(socks[0]);
      const struct rlimit no_core = {0, 0};
      setrlimit(RLIMIT_CORE, &no_core);
      const int listener = InstallSeccompProgram(program.fprog(), /*want_listener=*/true);
      if (listener < 0) _exit(100);
      // The kernel makes the listener close-on-exec; check, since leaking it into the
      // sandboxed program would let the program answer (and allow) its own violations.
      if ((fcntl(listener, F_GETFD) & FD_CLOEXEC) == 0) _exit(101);
      if (!SendFd(socks[1], listener, 'f')) _exit(102);
      close(listener);
      body(socks[1]);
      _exit(0);
    }
    close(socks[1]);
    NotifyingChild child;
    child.pid_ = pid;
    child.sock_ = UniqueFd(socks[0]);
    child.listener_ = ReceiveFd(child.sock_.get());
    return child;
  }

  pid_t pid() const { return pid_; }
  int listener() const { return listener_.get(); }

  // The next errno the child reported, or -1 if none arrived.
  int NextResult() {
    int value;
    if (!WaitReadable(sock_.get())) return -1;
    return read(sock_.get(), &value, sizeof(value)) == sizeof(value) ? value : -1;
  }

  // Reaps the child if it has exited: its wait status, or nullopt while it runs.
  std::optional<int> TryWait() {
    int status = -1;
    if (pid_ <= 0 || waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    pid_ = -1;
    return status;
  }

  int Wait() {
    int status = -1;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  ~NotifyingChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  NotifyingChild(NotifyingChild&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)),
        sock_(std::move(other.sock_)),
        listener_(std::move(other.listener_)) {}

 private:
  NotifyingChild() = default;
  pid_t pid_ = -1;
  UniqueFd sock_;
  UniqueFd listener_;
};

void Report(int sock, long rc) {
  const int value = rc < 0 ? errno : 0;
  (void)!write(sock, &value, sizeof(value));
}

class SeccompNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SeccompProgram> program = SeccompProgram::Build({.notify_violations = true});
    ASSERT_TRUE(program.ok()) << program.status();
    program_.emplace(*std::move(program));
  }

  // Receives one violation from `child`, failing the test instead of blocking forever.
  SeccompViolation Handle(NotifyingChild& child) {
    EXPECT_TRUE(WaitReadable(child.listener())) << "no notification arrived";
    absl::StatusOr<SeccompViolation> violation =
        HandleSeccompNotification(child.listener(), NativeArch());
    EXPECT_TRUE(violation.ok()) << violation.status();
    return violation.value_or(SeccompViolation{});
  }

  std::optional<SeccompProgram> program_;
};

TEST_F(SeccompNotifyTest, MountIsReportedAndAnsweredWithEperm) {
  NotifyingChild child = NotifyingChild::Start(*program_, [](int sock) {
    Report(sock, mount("none", "/nonexistent-moat-test", "tmpfs", 0, nullptr));
  });
  ASSERT_TRUE(child.listener() >= 0) << "the child did not send its listener";

  SeccompViolation violation = Handle(child);
  EXPECT_EQ(violation.syscall, "mount");
  EXPECT_EQ(violation.pid, child.pid());
  EXPECT_EQ(child.NextResult(), EPERM);
  const int status = child.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
}

TEST_F(SeccompNotifyTest, DescribesArgumentViolationsAndAnswersTheirErrno) {
  NotifyingChild child = NotifyingChild::Start(*program_, [](int sock) {
    const long clone_rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (clone_rc == 0) _exit(0);  // the filter failed; the test will see the wrong answer
    Report(sock, clone_rc);
    Report(sock, socket(AF_VSOCK, SOCK_STREAM, 0));
    char c = 'x';
    Report(sock, syscall(SYS_ioctl, 0, 0xabcd00000000ul | TIOCSTI, &c));
    Report(sock, syscall(SYS_unshare, CLONE_NEWNS));
    // Allowed calls do not notify: the next notification must still be unshare's.
    Report(sock, getpid() > 0 ? 0 : -1);
  });
  ASSERT_TRUE(child.listener() >= 0) << "the child did not send its listener";

  EXPECT_EQ(Handle(child).syscall, "clone(CLONE_NEWUSER)");
  EXPECT_EQ(child.NextResult(), EPERM);
  EXPECT_EQ(Handle(child).syscall, "socket(AF_VSOCK)");
  EXPECT_EQ(child.NextResult(), EAFNOSUPPORT);
  EXPECT_EQ(Handle(child).syscall, "ioctl(TIOCSTI)");
  EXPECT_EQ(child.NextResult(), EPERM);
  EXPECT_EQ(Handle(child).syscall, "unshare");
  EXPECT_EQ(child.NextResult(), EPERM);
  EXPECT_EQ(child.NextResult(), 0);
  const int status = child.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
}

TEST_F(SeccompNotifyTest, DeadTargetIsNotFound) {
  NotifyingChild child = NotifyingChild::Start(*program_, [](int sock) {
    Report(sock, mount("none", "/nonexistent-moat-test", "tmpfs", 0, nullptr));
  });
  ASSERT_TRUE(child.listener() >= 0) << "the child did not send its listener";
  ASSERT_TRUE(WaitReadable(child.listener()));  // the child now waits inside mount()
  kill(child.pid(), SIGKILL);
  child.Wait();

  // The kernel withdraws the notification and makes RECV fail with ENOENT. Should a kernel
  // block instead, SIGALRM ends the test binary loudly rather than hanging it.
  alarm(10);
  absl::StatusOr<SeccompViolation> violation =
      HandleSeccompNotification(child.listener(), NativeArch());
  alarm(0);
  EXPECT_EQ(violation.status().code(), absl::StatusCode::kNotFound) << violation.status();
}

// Runs `argv` under the notifying filter and plays supervisor until every process holding the
// filter has exited: the loop a real supervisor runs, reduced to a test.
struct SupervisedRun {
  int status = -1;
  std::vector<std::string> violations;
};

SupervisedRun RunSupervised(const SeccompProgram& program, std::vector<const char*> argv) {
  argv.push_back(nullptr);
  NotifyingChild child = NotifyingChild::Start(program, [&](int) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    execv(argv[0], const_cast<char* const*>(argv.data()));
    _exit(127);
  });
  SupervisedRun run;
  if (child.listener() < 0) return run;
  // POLLHUP: no process uses the filter any more (the child and all it started are gone). The
  // child is reaped as soon as it exits, not after the hang-up: before Linux 6.11 the kernel
  // releases a filter (and hangs up its listener) only when its last task is reaped, so waiting
  // for the hang-up first would wait out the whole bound below. The supervisor and the agent's
  // probe end on the pidfd for the same reason, never on the listener's hang-up.
  std::optional<int> status;
  for (int rounds = 0; rounds < 3000; ++rounds) {
    if (!status) status = child.TryWait();
    struct pollfd pfd = {child.listener(), POLLIN, 0};
    if (poll(&pfd, 1, 100) < 0) break;
    if (pfd.revents & POLLIN) {
      absl::StatusOr<SeccompViolation> violation =
          HandleSeccompNotification(child.listener(), NativeArch());
      if (violation.ok()) run.violations.push_back(violation->syscall);
      continue;
    }
    if (pfd.revents & (POLLHUP | POLLERR)) break;
  }
  run.status = status ? *status : child.Wait();
  return run;
}

TEST_F(SeccompNotifyTest, OrdinaryProgramsRaiseNoViolations) {
  // Violations feed alerts: an ordinary program that trips one would be noise.
  const std::vector<std::vector<const char*>> programs = {
      {"/bin/sh", "-c", "ls / | wc -l && echo hi > /dev/null"},
      {"/usr/bin/python3", "-c",
       "import socket, subprocess, threading; socket.socket(); "
       "threading.Thread(target=print).start(); subprocess.run(['/bin/true'], check=True)"},
      {"/usr/bin/node", "-e", "require('child_process').execFileSync('/bin/true')"},
      {"/usr/bin/git", "--version"},
  };
  for (const auto& argv : programs) {
    if (access(argv[0], X_OK) != 0) continue;
    SupervisedRun run = RunSupervised(*program_, argv);
    EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0)
        << argv[0] << ": wait status " << run.status;
    EXPECT_THAT(run.violations, ::testing::IsEmpty()) << argv[0];
  }
}

TEST_F(SeccompNotifyTest, ViolationsOfAnExecutedProgramAreReported) {
  if (access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "util-linux unshare not installed";
  SupervisedRun run = RunSupervised(*program_, {"/usr/bin/unshare", "--user", "/bin/true"});
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) != 0)
      << "unshare should fail; wait status " << run.status;
  EXPECT_THAT(run.violations, ::testing::ElementsAre("unshare"));
}

TEST_F(SeccompNotifyTest, BadListenerIsAnError) {
  absl::StatusOr<SeccompViolation> violation = HandleSeccompNotification(-1, NativeArch());
  EXPECT_FALSE(violation.ok());
  EXPECT_NE(violation.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SeccompNotifyTest, WithoutAListenerNotifyingCallsFailInsteadOfRunning) {
  // If the supervisor is gone (or was never given the listener), the kernel answers ENOSYS:
  // the call is still refused.
  const pid_t pid = fork();
  if (pid == 0) {
    if (InstallSeccompProgram(program_->fprog(), /*want_listener=*/false) != 0) _exit(100);
    const long rc = mount("none", "/nonexistent-moat-test", "tmpfs", 0, nullptr);
    _exit(rc < 0 && errno == ENOSYS ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
}

}  // namespace
}  // namespace moat::sandbox
