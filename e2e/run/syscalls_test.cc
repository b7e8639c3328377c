// Forbidden system calls, one sandbox per call: each must fail, be reported in --json as a
// violation of kind "seccomp", and leave the sandbox running. Calls through the 32-bit and x32
// ABIs (x86-64) or the AArch32 ABI (aarch64) must kill the process. Debugging one's own child must
// keep working.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct ForbiddenCall {
  const char* probe;       // syscall_probe's name for the attempt
  const char* errno_name;  // how the call must fail
  const char* violation;   // part of the violation detail; "" if the call is refused quietly
};

void PrintTo(const ForbiddenCall& c, std::ostream* os) { *os << c.probe; }

class ForbiddenSyscallTest : public E2eTest, public ::testing::WithParamInterface<ForbiddenCall> {};

TEST_P(ForbiddenSyscallTest, FailsAndIsReported) {
  const ForbiddenCall& c = GetParam();
  nlohmann::json r = RunJson({"--wall-timeout", "10s"}, {Attack("syscall_probe"), c.probe});
  ASSERT_TRUE(r.is_object());
  // The probe ran to its end (the call did not kill it) and saw the call fail the expected way.
  EXPECT_EQ(r["status"], "exited") << Describe(r);
  EXPECT_EQ(r["exit_code"], 0) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(),
              HasSubstr(absl::StrCat("blocked ", c.probe, ": ", c.errno_name)))
      << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
  if (*c.violation != '\0') {
    EXPECT_TRUE(HasViolation(r, "seccomp", c.violation))
        << "no seccomp violation mentioning \"" << c.violation << "\"\n"
        << Describe(r);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EachClass, ForbiddenSyscallTest,
    ::testing::Values(
        // Mounts and namespaces: the sandbox's shape is fixed.
        ForbiddenCall{"mount", "EPERM", "mount"}, ForbiddenCall{"remount", "EPERM", "mount"},
        ForbiddenCall{"umount2", "EPERM", "umount2"},
        ForbiddenCall{"pivot_root", "EPERM", "pivot_root"},
        ForbiddenCall{"chroot", "EPERM", "chroot"}, ForbiddenCall{"fsopen", "EPERM", "fsopen"},
        ForbiddenCall{"open_tree", "EPERM", "open_tree"},
        ForbiddenCall{"move_mount", "EPERM", "move_mount"},
        ForbiddenCall{"mount_setattr", "EPERM", "mount_setattr"},
        ForbiddenCall{"unshare_user", "EPERM", "unshare"},
        ForbiddenCall{"unshare_mnt", "EPERM", "unshare"},
        ForbiddenCall{"unshare_pid", "EPERM", "unshare"},
        ForbiddenCall{"unshare_net", "EPERM", "unshare"},
        ForbiddenCall{"unshare_uts", "EPERM", "unshare"},
        ForbiddenCall{"unshare_ipc", "EPERM", "unshare"},
        ForbiddenCall{"unshare_cgroup", "EPERM", "unshare"},
        ForbiddenCall{"unshare_time", "EPERM", "unshare"},
        ForbiddenCall{"clone_newuser", "EPERM", "clone(CLONE_NEWUSER)"},
        ForbiddenCall{"clone_newns", "EPERM", "clone(CLONE_NEWNS)"},
        ForbiddenCall{"clone_newpid", "EPERM", "clone(CLONE_NEWPID)"},
        ForbiddenCall{"clone_newnet", "EPERM", "clone(CLONE_NEWNET)"},
        // clone3 hides its flags from seccomp: refused quietly so that libc falls back to clone.
        ForbiddenCall{"clone3_newuser", "ENOSYS", ""}, ForbiddenCall{"setns", "EPERM", "setns"},
        // Keyrings are not namespaced.
        ForbiddenCall{"keyctl", "EPERM", "keyctl"}, ForbiddenCall{"add_key", "EPERM", "add_key"},
        ForbiddenCall{"request_key", "EPERM", "request_key"},
        // Large kernel attack surfaces.
        ForbiddenCall{"bpf", "EPERM", "bpf"},
        ForbiddenCall{"perf_event_open", "EPERM", "perf_event_open"},
        ForbiddenCall{"userfaultfd", "EPERM", "userfaultfd"},
        ForbiddenCall{"io_uring_setup", "EPERM", "io_uring_setup"},
        ForbiddenCall{"fanotify_init", "EPERM", "fanotify_init"},
        // File handles bypass the mount namespace.
        ForbiddenCall{"open_by_handle_at", "EPERM", "open_by_handle_at"},
        ForbiddenCall{"name_to_handle_at", "EPERM", "name_to_handle_at"},
        // Kernel modules and kexec.
        ForbiddenCall{"init_module", "EPERM", "init_module"},
        ForbiddenCall{"finit_module", "EPERM", "finit_module"},
        ForbiddenCall{"delete_module", "EPERM", "delete_module"},
        ForbiddenCall{"kexec_load", "EPERM", "kexec_load"},
        ForbiddenCall{"kexec_file_load", "EPERM", "kexec_file_load"},
        // The machine.
        ForbiddenCall{"reboot", "EPERM", "reboot"}, ForbiddenCall{"swapon", "EPERM", "swapon"},
        ForbiddenCall{"clock_settime", "EPERM", "clock_settime"},
        ForbiddenCall{"sethostname", "EPERM", "sethostname"},
        ForbiddenCall{"syslog", "EPERM", "syslog"}, ForbiddenCall{"acct", "EPERM", "acct"},
#if defined(__x86_64__)  // x86's port I/O and LDT (no such calls on aarch64)
        ForbiddenCall{"iopl", "EPERM", "iopl"}, ForbiddenCall{"ioperm", "EPERM", "ioperm"},
        ForbiddenCall{"modify_ldt", "EPERM", "modify_ldt"},
#endif
        ForbiddenCall{"personality", "EPERM", "personality"},
        // Socket families that reach outside the network namespace or into rare kernel code.
        ForbiddenCall{"socket_vsock", "EAFNOSUPPORT", "socket(AF_VSOCK)"},
        ForbiddenCall{"socket_packet", "EAFNOSUPPORT", "socket(AF_PACKET)"},
        ForbiddenCall{"socket_alg", "EAFNOSUPPORT", "socket(AF_ALG)"}),
    [](const ::testing::TestParamInfo<ForbiddenCall>& info) {
      return std::string(info.param.probe);
    });

// Every probe the program knows is covered above: a new probe cannot be forgotten here.
TEST_F(E2eTest, EveryProbeHasATest) {
  MoatResult r = RunPlain({}, {Attack("syscall_probe"), "--list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Counted rather than compared by name: the parameter list is the spec.
  int lines = 0;
  for (char ch : r.out) lines += ch == '\n';
#if defined(__x86_64__)
  EXPECT_EQ(lines, 51) << r.out;
#else
  EXPECT_EQ(lines, 48) << r.out;  // no iopl, ioperm, modify_ldt
#endif
}

// The sandboxed program was killed by the seccomp filter at its first system call, before it could
// print ESCAPED.
[[maybe_unused]] void ExpectKilledBySigsys(const nlohmann::json& r) {
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "signaled") << Describe(r);
  EXPECT_EQ(r["signal"], SIGSYS) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
}

#if defined(__x86_64__)

TEST_F(E2eTest, Int80SystemCallKillsTheProcess) {
  ExpectKilledBySigsys(RunJson({}, {Attack("compat_syscall"), "int80"}));
}

TEST_F(E2eTest, X32SystemCallKillsTheProcess) {
  ExpectKilledBySigsys(RunJson({}, {Attack("compat_syscall"), "x32"}));
}

TEST_F(E2eTest, Int80WithoutJsonExitsWith128PlusSigsys) {
  MoatResult r = RunPlain({}, {Attack("compat_syscall"), "int80"});
  EXPECT_EQ(r.exit_code, 128 + SIGSYS) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("ESCAPED")));
}

#endif  // __x86_64__

#if defined(__aarch64__)
// The 32-bit ARM build of compat_syscall (e2e/CMakeLists.txt makes it when arm-linux-gnueabihf-gcc
// is there): an AArch32 process under the aarch64 filter is killed at its first system call.
TEST_F(E2eTest, Arm32SystemCallKillsTheProcess) {
  const std::string arm32 = Attack("compat_syscall_arm32");
  if (!PathExists(arm32)) {
    GTEST_SKIP() << "no 32-bit ARM build of compat_syscall: install gcc-arm-linux-gnueabihf";
  }
  // The control: outside a sandbox the program runs to its end, so this kernel and CPU do run
  // 32-bit ARM code (CONFIG_COMPAT and AArch32 at EL0) and a kill inside means the filter.
  std::string host;
  if (FILE* p = ::popen((arm32 + " arm32").c_str(), "r")) {
    char buf[512];
    size_t n;
    while ((n = ::fread(buf, 1, sizeof(buf), p)) > 0) host.append(buf, n);
    ::pclose(p);
  }
  if (host.find("ESCAPED arm32") == std::string::npos) {
    GTEST_SKIP() << "this kernel or CPU does not run 32-bit ARM programs: " << host;
  }
  ExpectKilledBySigsys(RunJson({}, {arm32, "arm32"}));
}
#endif  // __aarch64__

TEST_F(E2eTest, PtraceOfInitFailsButOwnChildWorks) {
  nlohmann::json init = RunJson({}, {Attack("ptrace_probe"), "init"});
  ASSERT_TRUE(init.is_object());
  EXPECT_EQ(init["exit_code"], 0) << Describe(init);
  std::string out = init["stdout"];
  EXPECT_THAT(out, Not(HasSubstr("ESCAPED"))) << Describe(init);
  for (const char* what :
       {"ptrace-attach-init", "ptrace-seize-init", "process_vm_readv-init", "pidfd_getfd-init",
        "/proc/1/mem", "/proc/1/environ", "/proc/1/fd", "kill-init"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("blocked ", what, ": "))) << Describe(init);
  }

  nlohmann::json child = RunJson({}, {Attack("ptrace_probe"), "child"});
  ASSERT_TRUE(child.is_object());
  EXPECT_EQ(child["exit_code"], 0) << Describe(child);
  EXPECT_THAT(child["stdout"].get<std::string>(), HasSubstr("ok trace own child"))
      << Describe(child);
}

// A flood of violations must neither slow the supervisor down nor grow its memory without bound.
TEST_F(E2eTest, ViolationFloodIsCappedAndReturnsPromptly) {
  MoatResult raw;
  // The wall limit scales too: it only keeps a stuck flood from running forever, and under
  // emulation of arm64 system calls (14-25x slower) 20000 refused mounts took over 20 s.
  nlohmann::json r = RunJson({"--wall-timeout", absl::StrCat(static_cast<int>(Scaled(20)), "s")},
                             {Attack("misc_probe"), "flood", "20000"}, {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["exit_code"], 0) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("blocked 20000 mounts")) << Describe(r);
  ASSERT_TRUE(r["violations"].is_array());
  EXPECT_GE(r["violations"].size(), 1u);
  EXPECT_LT(r["violations"].size(), 20000u) << "every violation kept: the list is unbounded";
  EXPECT_TRUE(r.contains("violations_dropped")) << Describe(r).substr(0, 2000);
  EXPECT_LT(raw.seconds, Scaled(15));
  EXPECT_LT(raw.usage.ru_maxrss, 64 * 1024) << "moat's peak RSS in KiB";
}

}  // namespace
}  // namespace moat::e2e
