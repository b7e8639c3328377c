#include "sandbox/seccomp/seccomp_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace moat::sandbox {
namespace {

bool Matches(const MaskedValue& p, uint32_t x) { return (x & p.mask) == p.value; }

// Values worth probing for a cover of `excluded`: the excluded values, every one-bit neighbour
// of them, the extremes, and random values.
std::vector<uint32_t> Probes(const std::vector<uint32_t>& excluded) {
  std::vector<uint32_t> probes = {0, 1, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff};
  for (uint32_t v : excluded) {
    probes.push_back(v);
    probes.push_back(v + 1);
    probes.push_back(v - 1);
    for (int b = 0; b < 32; ++b) probes.push_back(v ^ (1u << b));
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) probes.push_back(rng());
  return probes;
}

void ExpectExactDisjointCover(const std::vector<uint32_t>& excluded) {
  const std::vector<MaskedValue> patterns = ComplementPatterns(excluded);
  EXPECT_LE(patterns.size(), std::max<size_t>(1, 32 * excluded.size()));
  const std::set<uint32_t> out(excluded.begin(), excluded.end());
  for (uint32_t x : Probes(excluded)) {
    int matches = 0;
    for (const MaskedValue& p : patterns) matches += Matches(p, x);
    EXPECT_EQ(matches, out.count(x) ? 0 : 1) << "value 0x" << std::hex << x;
  }
}

TEST(ComplementPatternsTest, NothingExcludedMatchesEverything) {
  std::vector<MaskedValue> patterns = ComplementPatterns({});
  ASSERT_EQ(patterns.size(), 1u);
  EXPECT_TRUE(Matches(patterns[0], 0));
  EXPECT_TRUE(Matches(patterns[0], 0xdeadbeef));
}

TEST(ComplementPatternsTest, OneValueNeedsOnePatternPerBit) {
  std::vector<MaskedValue> patterns = ComplementPatterns({0x5412});
  EXPECT_EQ(patterns.size(), 32u);
  ExpectExactDisjointCover({0x5412});
}

TEST(ComplementPatternsTest, CoversExactlyTheComplement) {
  ExpectExactDisjointCover({0x5412, 0x541c});
  ExpectExactDisjointCover({0, 8, 0x20000, 0x20008, 0xffffffff});
  ExpectExactDisjointCover({1, 2, 10, 15, 16, 17, 38, 40});
  ExpectExactDisjointCover({0, 1, 2, 3});  // a whole aligned block
}

TEST(ComplementPatternsTest, ExhaustiveInASmallRange) {
  const std::vector<uint32_t> excluded = {1, 2, 10, 15, 16, 17, 38, 40};
  const std::vector<MaskedValue> patterns = ComplementPatterns(excluded, 6);
  for (uint32_t x = 0; x < 4096; ++x) {
    int matches = 0;
    for (const MaskedValue& p : patterns) matches += Matches(p, x);
    const bool in_range_and_not_excluded =
        x < 64 && std::find(excluded.begin(), excluded.end(), x) == excluded.end();
    ASSERT_EQ(matches, in_range_and_not_excluded ? 1 : 0) << x;
  }
  for (uint32_t x : {0x80000001u, 0x100u | 3u, 0xffffffc3u}) {  // junk above the range
    for (const MaskedValue& p : patterns) EXPECT_FALSE(Matches(p, x)) << std::hex << x;
  }
}

TEST(ComplementPatternsTest, ExhaustiveOnLowBitsWithHighBitsFixed) {
  // Every value whose upper 16 bits match an excluded value's, so every branch of the trie
  // near the leaves is visited.
  const std::vector<uint32_t> excluded = {0x00005412, 0x0000541c, 0x00010000};
  const std::vector<MaskedValue> patterns = ComplementPatterns(excluded);
  for (uint32_t high : {0x0000u, 0x0001u}) {
    for (uint32_t low = 0; low <= 0xffff; ++low) {
      const uint32_t x = high << 16 | low;
      int matches = 0;
      for (const MaskedValue& p : patterns) matches += Matches(p, x);
      const bool is_excluded = x == excluded[0] || x == excluded[1] || x == excluded[2];
      ASSERT_EQ(matches, is_excluded ? 0 : 1) << std::hex << x;
    }
  }
}

// Two argument rules for one syscall can both match a call iff their masked values agree on
// the bits both masks test.
bool Overlap(const ArgMatch& a, const ArgMatch& b) {
  if (a.index != b.index) return true;  // different arguments: some call satisfies both
  return ((a.value ^ b.value) & a.mask & b.mask) == 0;
}

TEST(SandboxSyscallRulesTest, NoTwoRulesForASyscallDisagreeOnAnyCall) {
  std::map<std::string, std::vector<const SyscallRule*>> by_syscall;
  for (const SyscallRule& rule : SandboxSyscallRules()) {
    by_syscall[std::string(rule.syscall)].push_back(&rule);
  }
  for (const auto& [name, rules] : by_syscall) {
    for (size_t i = 0; i < rules.size(); ++i) {
      for (size_t j = i + 1; j < rules.size(); ++j) {
        const SyscallRule& a = *rules[i];
        const SyscallRule& b = *rules[j];
        // An unconditional rule would make libseccomp drop the conditional ones.
        EXPECT_TRUE(a.match.has_value() && b.match.has_value())
            << name << " has an unconditional rule and another rule";
        if (!a.match || !b.match) continue;
        const bool same_outcome = a.verdict == b.verdict && a.errno_value == b.errno_value;
        EXPECT_TRUE(same_outcome || !Overlap(*a.match, *b.match))
            << name << ": rules " << i << " and " << j << " overlap with different verdicts";
      }
    }
  }
}

const SyscallRule* Unconditional(absl::string_view name) {
  for (const SyscallRule& rule : SandboxSyscallRules()) {
    if (rule.syscall == name && !rule.match) return &rule;
  }
  return nullptr;
}

TEST(SandboxSyscallRulesTest, EscapeRoutesAreViolations) {
  for (absl::string_view name : {"unshare",
                                 "setns",
                                 "mount",
                                 "umount2",
                                 "pivot_root",
                                 "chroot",
                                 "fsopen",
                                 "fsconfig",
                                 "fsmount",
                                 "fspick",
                                 "move_mount",
                                 "open_tree",
                                 "mount_setattr",
                                 "add_key",
                                 "request_key",
                                 "keyctl",
                                 "bpf",
                                 "perf_event_open",
                                 "userfaultfd",
                                 "io_uring_setup",
                                 "io_uring_enter",
                                 "io_uring_register",
                                 "open_by_handle_at",
                                 "name_to_handle_at",
                                 "init_module",
                                 "finit_module",
                                 "delete_module",
                                 "kexec_load",
                                 "kexec_file_load",
                                 "reboot",
                                 "swapon",
                                 "swapoff",
                                 "acct",
                                 "settimeofday",
                                 "clock_settime",
                                 "clock_adjtime",
                                 "syslog",
                                 "quotactl",
                                 "iopl",
                                 "ioperm"}) {
    const SyscallRule* rule = Unconditional(name);
    ASSERT_NE(rule, nullptr) << name;
    EXPECT_EQ(rule->verdict, SyscallVerdict::kViolation) << name;
    EXPECT_EQ(rule->errno_value, EPERM) << name;
  }
}

TEST(SandboxSyscallRulesTest, Clone3FailsWithEnosysSoLibcFallsBack) {
  const SyscallRule* rule = Unconditional("clone3");
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->verdict, SyscallVerdict::kErrno);
  EXPECT_EQ(rule->errno_value, ENOSYS);
}

TEST(SandboxSyscallRulesTest, PtraceSeccompAndLandlockAreAllowed) {
  for (absl::string_view name : {"ptrace", "seccomp", "landlock_create_ruleset",
                                 "landlock_add_rule", "landlock_restrict_self"}) {
    const SyscallRule* rule = Unconditional(name);
    ASSERT_NE(rule, nullptr) << name;
    EXPECT_EQ(rule->verdict, SyscallVerdict::kAllow) << name;
  }
}

TEST(SandboxSyscallRulesTest, ArgumentFilteredSyscallsHaveOnlyArgumentRules) {
  for (absl::string_view name : {"clone", "ioctl", "socket", "socketpair", "personality"}) {
    EXPECT_EQ(Unconditional(name), nullptr) << name;
  }
}

TEST(ViolationErrnoTest, SocketFamiliesGetEafnosupport) {
  EXPECT_EQ(ViolationErrno("socket"), EAFNOSUPPORT);
  EXPECT_EQ(ViolationErrno("mount"), EPERM);
  EXPECT_EQ(ViolationErrno("clone"), EPERM);
}

TEST(DescribeViolationTest, NamesTheDangerousArgument) {
  const uint64_t newuser[6] = {0x10000000 | 17};  // CLONE_NEWUSER | SIGCHLD
  EXPECT_EQ(DescribeViolation("clone", newuser), "clone(CLONE_NEWUSER)");
  const uint64_t two[6] = {0x10000000 | 0x20000};
  EXPECT_EQ(DescribeViolation("clone", two), "clone(CLONE_NEWNS|CLONE_NEWUSER)");
  const uint64_t vsock[6] = {AF_VSOCK, SOCK_STREAM};
  EXPECT_EQ(DescribeViolation("socket", vsock), "socket(AF_VSOCK)");
  const uint64_t tiocsti[6] = {0, 0xabcd000000005412ull};  // junk in the upper half
  EXPECT_EQ(DescribeViolation("ioctl", tiocsti), "ioctl(TIOCSTI)");
  const uint64_t persona[6] = {0x0400000};
  EXPECT_EQ(DescribeViolation("personality", persona), "personality(0x400000)");
  EXPECT_EQ(DescribeViolation("mount", {}), "mount");
}

}  // namespace
}  // namespace moat::sandbox
