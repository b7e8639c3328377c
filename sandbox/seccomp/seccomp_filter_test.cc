#include "sandbox/seccomp/seccomp_filter.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "sandbox/seccomp/bpf_interpreter.h"
#include "sandbox/testing/status_matchers.h"

namespace moat::sandbox {
namespace {

// ---------------------------------------------------------------------------------------------
// The program, evaluated by the interpreter, for both arches and both notification modes.

class SeccompProgramTest : public ::testing::TestWithParam<std::tuple<Arch, bool>> {
 protected:
  void SetUp() override {
    absl::StatusOr<SeccompProgram> program =
        SeccompProgram::Build({.arch = arch(), .notify_violations = notify()});
    ASSERT_TRUE(program.ok()) << program.status();
    program_.emplace(*std::move(program));
  }

  Arch arch() const { return std::get<0>(GetParam()); }
  bool notify() const { return std::get<1>(GetParam()); }

  // The verdict for a native syscall of this arch, by name.
  std::string Verdict(absl::string_view name, std::initializer_list<uint64_t> args = {}) {
    absl::StatusOr<int> nr = SyscallNumber(arch(), name);
    if (!nr.ok()) return std::string(nr.status().message());
    return VerdictFor(AuditArch(arch()), *nr, args);
  }

  std::string VerdictFor(uint32_t audit_arch, int nr, std::initializer_list<uint64_t> args = {}) {
    absl::StatusOr<uint32_t> verdict =
        RunSeccompBpf(program_->instructions(), MakeSeccompData(audit_arch, nr, args));
    if (!verdict.ok()) return std::string(verdict.status().message());
    return SeccompActionName(*verdict);
  }

  // What a violation looks like in this mode.
  std::string Violation(int errno_value = EPERM) const {
    return notify() ? "USER_NOTIF" : "ERRNO(" + std::to_string(errno_value) + ")";
  }

  std::optional<SeccompProgram> program_;
};

TEST_P(SeccompProgramTest, DescribesItself) {
  EXPECT_EQ(program_->arch(), arch());
  EXPECT_EQ(program_->notifies(), notify());
  EXPECT_EQ(program_->fprog()->len, program_->instructions().size());
  EXPECT_EQ(program_->fprog()->filter, program_->instructions().data());
  EXPECT_TRUE(ValidateSeccompBpf(program_->instructions()).ok());
}

TEST_P(SeccompProgramTest, AllowsOrdinaryWork) {
  for (absl::string_view name :
       {"read", "write", "openat", "close", "execve", "futex", "mmap", "exit_group", "wait4",
        "rt_sigaction", "ptrace", "seccomp", "landlock_create_ruleset", "bind", "connect"}) {
    EXPECT_EQ(Verdict(name), "ALLOW") << name;
  }
  EXPECT_EQ(Verdict("clone", {SIGCHLD}), "ALLOW");
  // What glibc's pthread_create and posix_spawn pass.
  EXPECT_EQ(
      Verdict("clone", {CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                        CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID}),
      "ALLOW");
  EXPECT_EQ(Verdict("clone", {CLONE_VM | CLONE_VFORK | SIGCHLD}), "ALLOW");
  EXPECT_EQ(Verdict("ioctl", {1, TCGETS}), "ALLOW");
  EXPECT_EQ(Verdict("ioctl", {1, TIOCGWINSZ}), "ALLOW");
  EXPECT_EQ(Verdict("ioctl", {1, FIONREAD}), "ALLOW");
  for (uint64_t family : {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK}) {
    EXPECT_EQ(Verdict("socket", {family, SOCK_STREAM}), "ALLOW") << family;
  }
  EXPECT_EQ(Verdict("socketpair", {AF_UNIX, SOCK_STREAM}), "ALLOW");
  for (uint64_t persona : {0x0ull, 0x8ull, 0x20000ull, 0x20008ull, 0xffffffffull}) {
    EXPECT_EQ(Verdict("personality", {persona}), "ALLOW") << std::hex << persona;
  }
}

TEST_P(SeccompProgramTest, EscapeRoutesAreViolations) {
  for (absl::string_view name : {"mount",
                                 "umount2",
                                 "unshare",
                                 "setns",
                                 "pivot_root",
                                 "chroot",
                                 "fsopen",
                                 "fsmount",
                                 "move_mount",
                                 "open_tree",
                                 "mount_setattr",
                                 "bpf",
                                 "keyctl",
                                 "add_key",
                                 "perf_event_open",
                                 "userfaultfd",
                                 "io_uring_setup",
                                 "io_uring_enter",
                                 "open_by_handle_at",
                                 "init_module",
                                 "finit_module",
                                 "kexec_load",
                                 "reboot",
                                 "syslog",
                                 "clock_settime"}) {
    EXPECT_EQ(Verdict(name), Violation()) << name;
  }
  EXPECT_EQ(Verdict("clone", {CLONE_NEWUSER | SIGCHLD}), Violation());
  EXPECT_EQ(Verdict("clone", {CLONE_NEWNET}), Violation());
  EXPECT_EQ(Verdict("clone", {CLONE_NEWPID | CLONE_NEWNS | SIGCHLD}), Violation());
  EXPECT_EQ(Verdict("personality", {0x0400000 /* READ_IMPLIES_EXEC */}), Violation());
  EXPECT_EQ(Verdict("personality", {0x0040000 /* ADDR_NO_RANDOMIZE */}), Violation());
  EXPECT_EQ(Verdict("personality", {0x0200000 /* ADDR_COMPAT_LAYOUT */}), Violation());
  EXPECT_EQ(Verdict("personality", {0x0100000 /* MMAP_PAGE_ZERO */}), Violation());
  // Other odd values are refused without a report.
  EXPECT_EQ(Verdict("personality", {0x1000000 /* SHORT_INODE */}), "ERRNO(1)");
  EXPECT_EQ(Verdict("personality", {0xfffffffe}), "ERRNO(1)");
}

TEST_P(SeccompProgramTest, TerminalInjectionIoctlsAreViolationsOnTheLow32Bits) {
  EXPECT_EQ(Verdict("ioctl", {0, TIOCSTI}), Violation());
  EXPECT_EQ(Verdict("ioctl", {0, TIOCLINUX}), Violation());
  // The kernel takes cmd as an unsigned int, so junk above bit 31 must not hide TIOCSTI.
  EXPECT_EQ(Verdict("ioctl", {0, 0xdeadbeef00000000ull | TIOCSTI}), Violation());
  EXPECT_EQ(Verdict("ioctl", {0, 0xffffffff00000000ull | TIOCLINUX}), Violation());
  // Neighbours of TIOCSTI are ordinary ioctls.
  EXPECT_EQ(Verdict("ioctl", {0, TIOCSTI + 1}), "ALLOW");
  EXPECT_EQ(Verdict("ioctl", {0, 0x100000000ull | TCGETS}), "ALLOW");
}

TEST_P(SeccompProgramTest, DangerousSocketFamiliesAreViolations) {
  for (uint64_t family : {AF_VSOCK, AF_ALG, AF_PACKET, AF_KEY}) {
    EXPECT_EQ(Verdict("socket", {family, SOCK_STREAM}), Violation(EAFNOSUPPORT)) << family;
  }
  EXPECT_EQ(Verdict("socket", {0x100000000ull | AF_VSOCK}), Violation(EAFNOSUPPORT));
  // Other families are refused quietly, as a kernel without them would.
  for (uint64_t family : {AF_BLUETOOTH, AF_CAN, AF_TIPC, AF_XDP, AF_RDS, 0, 63}) {
    EXPECT_EQ(Verdict("socket", {family, SOCK_STREAM}), "ERRNO(97)") << family;
  }
  EXPECT_EQ(Verdict("socket", {1000, SOCK_STREAM}), "ERRNO(1)");  // not a family at all
  EXPECT_EQ(Verdict("socketpair", {AF_INET, SOCK_STREAM}), "ERRNO(1)");
}

TEST_P(SeccompProgramTest, Clone3GetsEnosys) { EXPECT_EQ(Verdict("clone3"), "ERRNO(38)"); }

TEST_P(SeccompProgramTest, UnknownSyscallsGetEperm) {
  EXPECT_EQ(VerdictFor(AuditArch(arch()), 999), "ERRNO(1)");
  EXPECT_EQ(VerdictFor(AuditArch(arch()), 0x3fffffff), "ERRNO(1)");
  // Docker denies these without making them violations; so do we.
  EXPECT_EQ(Verdict("mbind"), "ERRNO(1)");
  EXPECT_EQ(Verdict("move_pages"), "ERRNO(1)");
}

TEST_P(SeccompProgramTest, ForeignArchitecturesAreKilled) {
  if (arch() == Arch::kX86_64) {
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_I386, 20 /* getpid */), "KILL_PROCESS");
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_I386, 1 /* exit */), "KILL_PROCESS");
    // x32 shares AUDIT_ARCH_X86_64 and marks its numbers with bit 30.
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_X86_64, 0x40000000 | 39 /* getpid */), "KILL_PROCESS");
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_X86_64, 0x40000000 | 0 /* read */), "KILL_PROCESS");
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_X86_64, 0x40000000 | 165 /* mount */), "KILL_PROCESS");
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_AARCH64, 63), "KILL_PROCESS");
  } else {
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_ARM, 20 /* getpid */), "KILL_PROCESS");
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_ARM, 3 /* read */), "KILL_PROCESS");
    EXPECT_EQ(VerdictFor(AUDIT_ARCH_X86_64, 0), "KILL_PROCESS");
  }
}

TEST_P(SeccompProgramTest, UsesTheArchsOwnNumbers) {
  // openat is 257 on x86-64 and 56 on aarch64; the program must follow the arch, not the host.
  const int other_openat = arch() == Arch::kX86_64 ? 56 : 257;
  const std::string other_name = SyscallName(arch(), other_openat);
  EXPECT_NE(other_name, "openat");
  const int openat = *SyscallNumber(arch(), "openat");
  EXPECT_EQ(openat, arch() == Arch::kX86_64 ? 257 : 56);
  EXPECT_EQ(VerdictFor(AuditArch(arch()), openat), "ALLOW");
}

INSTANTIATE_TEST_SUITE_P(ArchAndMode, SeccompProgramTest,
                         ::testing::Combine(::testing::Values(Arch::kX86_64, Arch::kAarch64),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(ArchName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_notify" : "_errno");
                         });

// The program that hands creating calls to the creation guard (creation_guard.h): those notify,
// everything else is as in the plain notifying program.
class GuardedProgramTest : public ::testing::TestWithParam<Arch> {
 protected:
  std::string Verdict(bool guard, absl::string_view name, std::initializer_list<uint64_t> args) {
    absl::StatusOr<SeccompProgram> program = SeccompProgram::Build(
        {.arch = GetParam(), .notify_violations = true, .guard_creation = guard});
    if (!program.ok()) return std::string(program.status().message());
    absl::StatusOr<int> nr = SyscallNumber(GetParam(), name);
    if (!nr.ok()) return std::string(nr.status().message());
    absl::StatusOr<uint32_t> verdict =
        RunSeccompBpf(program->instructions(), MakeSeccompData(AuditArch(GetParam()), *nr, args));
    if (!verdict.ok()) return std::string(verdict.status().message());
    return SeccompActionName(*verdict);
  }
};

TEST_P(GuardedProgramTest, CreatingCallsNotifyOnlyWhenGuarded) {
  const uint64_t cwd = static_cast<uint64_t>(AT_FDCWD);
  struct Case {
    const char* name;
    std::initializer_list<uint64_t> args;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"openat", {cwd, 0, O_CREAT | O_WRONLY, 0644}},
           {"mkdirat", {cwd, 0, 0755}},
           {"mknodat", {cwd, 0, S_IFIFO | 0644, 0}},
           {"symlinkat", {0, cwd, 0}},
           {"linkat", {cwd, 0, cwd, 0, 0}},
           {"renameat2", {cwd, 0, cwd, 0, 0}},
       }) {
    EXPECT_EQ(Verdict(true, c.name, c.args), "USER_NOTIF") << c.name;
    EXPECT_EQ(Verdict(false, c.name, c.args), "ALLOW") << c.name;
  }
  // Opening without O_CREAT, and calls that remove or read, stay the kernel's.
  for (bool guard : {true, false}) {
    EXPECT_EQ(Verdict(guard, "openat", {cwd, 0, O_RDONLY, 0}), "ALLOW");
    EXPECT_EQ(Verdict(guard, "openat", {cwd, 0, O_WRONLY | O_TRUNC, 0}), "ALLOW");
    EXPECT_EQ(Verdict(guard, "unlinkat", {cwd, 0, 0}), "ALLOW");
    EXPECT_EQ(Verdict(guard, "read", {0, 0, 0}), "ALLOW");
    // Violations are unchanged (the guard hands them back: CreationGuard::Takes).
    EXPECT_EQ(Verdict(guard, "mkdirat", {cwd, 0, 04755}), "USER_NOTIF");
    EXPECT_EQ(Verdict(guard, "mount", {0, 0, 0}), "USER_NOTIF");
    EXPECT_EQ(Verdict(guard, "openat2", {cwd, 0, 0, 0}), "ERRNO(38)");
  }
}

TEST(GuardedProgramOptionsTest, GuardingNeedsNotifications) {
  EXPECT_THAT(
      SeccompProgram::Build({.notify_violations = false, .guard_creation = true}),
      matchers::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("must notify")));
  EXPECT_THAT(SeccompProgram::Build({.notify_violations = true, .guard_creation = true}),
              matchers::IsOk());
}

INSTANTIATE_TEST_SUITE_P(Arches, GuardedProgramTest,
                         ::testing::Values(Arch::kX86_64, Arch::kAarch64),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

TEST(SeccompProgramCopyTest, CopiesAndMovesKeepFprogPointingAtTheirOwnInstructions) {
  absl::StatusOr<SeccompProgram> built = SeccompProgram::Build({});
  ASSERT_TRUE(built.ok()) << built.status();
  SeccompProgram copy = *built;
  EXPECT_EQ(copy.fprog()->filter, copy.instructions().data());
  EXPECT_NE(copy.fprog()->filter, built->fprog()->filter);
  EXPECT_EQ(copy.fprog()->len, built->fprog()->len);
  SeccompProgram moved = std::move(copy);
  EXPECT_EQ(moved.fprog()->filter, moved.instructions().data());
  EXPECT_EQ(moved.fprog()->len, built->fprog()->len);
  copy = moved;  // assigning to a moved-from object works too
  EXPECT_EQ(copy.fprog()->filter, copy.instructions().data());
}

double CpuMillis() {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

TEST(SeccompProgramBuildTest, BuildIsFastEnoughToRunPerPolicy) {
  constexpr int kRounds = 50;
  for (Arch arch : {Arch::kX86_64, Arch::kAarch64}) {
    size_t size = 0;
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = CpuMillis();
    for (int i = 0; i < kRounds; ++i) {
      absl::StatusOr<SeccompProgram> program = SeccompProgram::Build({.arch = arch});
      ASSERT_TRUE(program.ok()) << program.status();
      size = program->instructions().size();
    }
    const double cpu_ms = (CpuMillis() - cpu_start) / kRounds;
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        kRounds;
    std::printf("[ measure  ] Build(%s): %.3f ms wall, %.3f ms CPU per program, %zu instructions\n",
                std::string(ArchName(arch)).c_str(), wall_ms, cpu_ms, size);
    // Generous, because the machine is shared: what this catches is a regression to tens of
    // milliseconds, e.g. from rules that blow up libseccomp's argument trees.
    EXPECT_LT(cpu_ms, 20.0);
  }
}

TEST(SyscallNamesTest, ResolvePerArch) {
  EXPECT_EQ(*SyscallNumber(Arch::kX86_64, "getpid"), 39);
  EXPECT_EQ(*SyscallNumber(Arch::kAarch64, "getpid"), 172);
  EXPECT_EQ(SyscallName(Arch::kAarch64, 172), "getpid");
  EXPECT_EQ(SyscallNumber(Arch::kAarch64, "fork").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(SyscallName(Arch::kX86_64, 100000), "");
  EXPECT_EQ(AuditArch(Arch::kX86_64), AUDIT_ARCH_X86_64);
  EXPECT_EQ(AuditArch(Arch::kAarch64), AUDIT_ARCH_AARCH64);
}

// ---------------------------------------------------------------------------------------------
// The program, installed for real in a forked child on this machine.

// Runs `body` in a forked child that installs `program` first (with core dumps off, since some
// children are meant to die of SIGSYS). Returns the child's wait status.
template <typename Body>
int RunFiltered(const SeccompProgram& program, Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    const struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    const int rc = InstallSeccompProgram(program.fprog(), /*want_listener=*/false);
    if (rc != 0) _exit(100);
    _exit(body());
  }
  int status = -1;
  if (pid > 0) waitpid(pid, &status, 0);
  return status;
}

class InstalledFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Plain ERRNO for violations: no supervisor in these tests.
    absl::StatusOr<SeccompProgram> program = SeccompProgram::Build({.notify_violations = false});
    ASSERT_TRUE(program.ok()) << program.status();
    program_.emplace(*std::move(program));
  }
  std::optional<SeccompProgram> program_;
};

// -errno of a failed call, or its (non-negative) result.
long Result(long rc) { return rc < 0 ? -errno : rc; }

TEST_F(InstalledFilterTest, DeniesEscapesAndAllowsOrdinaryCalls) {
  int report[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  int dummy[2];  // a pipe: any ioctl the filter lets through fails with ENOTTY in the kernel
  ASSERT_EQ(pipe2(dummy, O_CLOEXEC), 0);

  enum Check {
    kUnshare,
    kMount,
    kTiocsti,
    kTiocstiHighJunk,
    kTcgets,
    kCloneNewUser,
    kClone3,
    kFork,
    kUnknown,
    kPacketSocket,
    kInetSocket,
    kPersonalityExec,
    kPersonalityQuery,
    kCount
  };
  const int status = RunFiltered(*program_, [&] {
    long results[kCount];
    char c = 'x';
    results[kUnshare] = Result(syscall(SYS_unshare, CLONE_NEWUSER));
    // The target does not exist: the kernel itself would say ENOENT, the filter says EPERM.
    results[kMount] = Result(mount("none", "/nonexistent-moat-test", "tmpfs", 0, nullptr));
    results[kTiocsti] = Result(ioctl(dummy[0], TIOCSTI, &c));
    results[kTiocstiHighJunk] = Result(syscall(SYS_ioctl, dummy[0], 0x100000000ul | TIOCSTI, &c));
    struct termios tio;
    results[kTcgets] = Result(ioctl(dummy[0], TCGETS, &tio));
    long clone_rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (clone_rc == 0) _exit(0);  // the filter failed; do not run the rest twice
    results[kCloneNewUser] = Result(clone_rc);
    results[kClone3] = Result(syscall(SYS_clone3, nullptr, 0));  // the kernel would say EINVAL
    const pid_t child = fork();
    if (child == 0) _exit(7);
    int child_status = 0;
    waitpid(child, &child_status, 0);
    results[kFork] = WIFEXITED(child_status) ? WEXITSTATUS(child_status) : -1;
    results[kUnknown] = Result(syscall(999));                         // the kernel would say ENOSYS
    results[kPacketSocket] = Result(socket(AF_PACKET, SOCK_RAW, 0));  // root could open this
    const long inet = Result(socket(AF_INET, SOCK_STREAM, 0));
    results[kInetSocket] = inet >= 0 ? 0 : inet;
    results[kPersonalityExec] = Result(personality(READ_IMPLIES_EXEC));
    results[kPersonalityQuery] = Result(personality(0xffffffff));
    return write(report[1], results, sizeof(results)) == sizeof(results) ? 0 : 1;
  });
  close(report[1]);
  close(dummy[0]);
  close(dummy[1]);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  long results[kCount];
  ASSERT_EQ(read(report[0], results, sizeof(results)), static_cast<ssize_t>(sizeof(results)));
  close(report[0]);

  EXPECT_EQ(results[kUnshare], -EPERM);
  EXPECT_EQ(results[kMount], -EPERM);
  EXPECT_EQ(results[kTiocsti], -EPERM);
  EXPECT_EQ(results[kTiocstiHighJunk], -EPERM);
  EXPECT_EQ(results[kTcgets], -ENOTTY);  // reached the kernel
  EXPECT_EQ(results[kCloneNewUser], -EPERM);
  EXPECT_EQ(results[kClone3], -ENOSYS);
  EXPECT_EQ(results[kFork], 7);
  EXPECT_EQ(results[kUnknown], -EPERM);
  EXPECT_EQ(results[kPacketSocket], -EAFNOSUPPORT);
  EXPECT_EQ(results[kInetSocket], 0);
  EXPECT_EQ(results[kPersonalityExec], -EPERM);
  EXPECT_GE(results[kPersonalityQuery], 0);
}

#if defined(__x86_64__)
// i386 getpid through the 32-bit entry point; returns the raw result.
long Int80Getpid() {
  long ret;
  asm volatile("int $0x80" : "=a"(ret) : "a"(20) : "memory");
  return ret;
}

TEST_F(InstalledFilterTest, I386SyscallKillsTheProcess) {
  // Control: without the filter, does this kernel run i386 syscalls at all?
  const pid_t control = fork();
  if (control == 0) {
    const struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    _exit(Int80Getpid() == getpid() ? 0 : 1);
  }
  int control_status = -1;
  waitpid(control, &control_status, 0);
  if (!WIFEXITED(control_status) || WEXITSTATUS(control_status) != 0) {
    GTEST_SKIP() << "this kernel does not run i386 syscalls (no IA32 emulation), status "
                 << control_status;
  }

  const int status = RunFiltered(*program_, [] { return Int80Getpid() >= 0 ? 0 : 1; });
  ASSERT_TRUE(WIFSIGNALED(status)) << "wait status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGSYS);
}

TEST_F(InstalledFilterTest, X32SyscallKillsTheProcess) {
  // Without the filter a kernel lacking x32 answers ENOSYS; with it the process must die.
  const int status =
      RunFiltered(*program_, [] { return syscall(0x40000000 | SYS_getpid) >= 0 ? 0 : 1; });
  ASSERT_TRUE(WIFSIGNALED(status)) << "wait status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGSYS);
}
#endif

// Runs `argv` under the filter with stdout and stderr discarded; returns the wait status.
int RunProgramFiltered(const SeccompProgram& program, std::vector<const char*> argv) {
  argv.push_back(nullptr);
  return RunFiltered(program, [&] {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    execv(argv[0], const_cast<char* const*>(argv.data()));
    return 127;
  });
}

struct ProgramCase {
  const char* name;
  std::vector<const char*> argv;
  // A program the case runs through the shell (looked up on PATH); the case is skipped when it
  // is absent, as when argv[0] itself is.
  const char* needs = nullptr;
};

// Whether `program` is an executable file in one of PATH's directories.
bool OnPath(const std::string& program) {
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    if (access(absl::StrCat(dir, "/", program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

class OrdinaryProgramTest : public InstalledFilterTest,
                            public ::testing::WithParamInterface<ProgramCase> {};

TEST_P(OrdinaryProgramTest, RunsUnderTheFilter) {
  const ProgramCase& c = GetParam();
  if (access(c.argv[0], X_OK) != 0) GTEST_SKIP() << c.argv[0] << " is not installed";
  if (c.needs != nullptr && !OnPath(c.needs)) {
    GTEST_SKIP() << c.needs << " is not installed (not on PATH)";
  }
  const int status = RunProgramFiltered(*program_, c.argv);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << c.name << ": wait status " << status
      << (WIFSIGNALED(status) ? " (signal " + std::to_string(WTERMSIG(status)) + ")" : "");
}

// Threads, sockets, subprocesses, a shell pipeline; and, from inside, the filter's answers.
constexpr char kPythonScript[] = R"(
import ctypes, errno, socket, subprocess, threading
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.sendall(b"x")
assert a.recv(1) == b"x"
u, v = socket.socketpair(); u.sendall(b"y"); assert v.recv(1) == b"y"
out = []
t = threading.Thread(target=lambda: out.append(1)); t.start(); t.join(); assert out == [1]
assert subprocess.run(["/bin/true"]).returncode == 0
assert subprocess.run("echo hi | tr a-z A-Z", shell=True, capture_output=True).stdout == b"HI\n"
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); raise SystemExit("AF_PACKET allowed")
except OSError as e:
    assert e.errno == errno.EAFNOSUPPORT, e
libc = ctypes.CDLL(None, use_errno=True)
assert libc.unshare(0x10000000) == -1 and ctypes.get_errno() == errno.EPERM
)";

constexpr char kNodeScript[] = R"(
const cp = require('child_process'), net = require('net'), fs = require('fs');
if (cp.execFileSync('/bin/echo', ['hi']).toString() !== 'hi\n') process.exit(2);
fs.writeFileSync('/dev/null', 'x');
const server = net.createServer(s => s.end('pong')).listen(0, '127.0.0.1', () => {
  net.connect(server.address().port, '127.0.0.1').on('data', d => {
    process.exit(d.toString() === 'pong' ? 0 : 3);
  });
});
)";

INSTANTIATE_TEST_SUITE_P(
    Programs, OrdinaryProgramTest,
    ::testing::Values(
        ProgramCase{"true", {"/bin/true"}},
        ProgramCase{"shell",
                    {"/bin/sh", "-c",
                     "ls / | grep -q bin && echo x > /dev/null && "
                     "cat /proc/self/status | wc -l >/dev/null"}},
        ProgramCase{"python3", {"/usr/bin/python3", "-c", kPythonScript}},
        ProgramCase{"node", {"/usr/bin/node", "-e", kNodeScript}},
        ProgramCase{"gcc",
                    {"/bin/sh", "-c",
                     "d=$(mktemp -d) && echo 'int main(){return 0;}' > $d/a.c && "
                     "gcc -O2 -o $d/a $d/a.c && $d/a && rm -r $d"},
                    "gcc"},
        ProgramCase{"git",
                    {"/bin/sh", "-c",
                     "d=$(mktemp -d) && cd $d && git init -q && "
                     "git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && "
                     "git log --oneline | grep -q x && cd / && rm -rf $d"},
                    "git"},
        ProgramCase{"curl", {"/usr/bin/curl", "-sS", "-o", "/dev/null", "file:///etc/hostname"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace moat::sandbox
