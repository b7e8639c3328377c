// What sandboxed code may ask the kernel for, as data. seccomp_filter.cc turns these rules into
// a libseccomp program; seccomp_notify.cc uses the same file to answer and describe violations,
// so the filter and the supervisor cannot disagree about what a violation means.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace moat::sandbox {

enum class SyscallVerdict {
  kAllow,
  // Denied and reported: the filter notifies the supervisor (SCMP_ACT_NOTIFY), which answers
  // with `errno_value` and records the attempt; without a supervisor, plain ERRNO(errno_value).
  // Reserved for calls that ordinary programs do not make but escapes do (mount, unshare, ...).
  kViolation,
  // Denied quietly with `errno_value`: not an attack, just something we do not offer
  // (clone3 -> ENOSYS so glibc falls back to clone; odd socket families -> EAFNOSUPPORT).
  kErrno,
};

// Matches when (low 32 bits of args[index]) & mask == value. Every argument we filter on is a
// 32-bit int or unsigned int to the kernel (ioctl's cmd, socket's family, personality) or is
// truncated to 32 bits by it (clone's flags), so a caller can put junk in the upper half; a
// 64-bit comparison would let `TIOCSTI | 1 << 32` through while the kernel still sees TIOCSTI.
struct ArgMatch {
  unsigned index = 0;
  uint32_t mask = 0;
  uint32_t value = 0;
};

struct SyscallRule {
  absl::string_view syscall;  // libseccomp's name; the rule is skipped on arches without it
  SyscallVerdict verdict = SyscallVerdict::kAllow;
  int errno_value = 0;            // kViolation and kErrno
  std::optional<ArgMatch> match;  // none: the rule covers every call
};

// The whole policy. Anything without a matching rule, including syscall numbers the policy has
// never heard of, gets the filter's default, ERRNO(EPERM). Rules for one syscall never overlap
// with different verdicts: libseccomp gives no guarantee about which of two overlapping argument
// rules it tests first, and an unconditional rule silently overrides the conditional ones.
const std::vector<SyscallRule>& SandboxSyscallRules();

// Disjoint (mask, value) patterns that together match exactly the values in [0, 2^bits) that
// are not in `excluded` (1 <= bits <= 32). libseccomp has no "otherwise" branch per syscall (the
// rest goes to the filter's default) and allows one comparison per argument per rule, so "allow
// every ioctl but TIOCSTI and TIOCLINUX" is written as this cover: at most 32 patterns per excluded
// value, found by walking the binary trie of the excluded values and emitting each subtree they
// leave empty.
struct MaskedValue {
  uint32_t mask = 0;
  uint32_t value = 0;
};
std::vector<MaskedValue> ComplementPatterns(absl::Span<const uint32_t> excluded, int bits = 32);

// The errno a violation of `syscall` is answered with: EAFNOSUPPORT for socket (what the kernel
// says for a family it lacks, which programs handle), EPERM for everything else.
int ViolationErrno(absl::string_view syscall);

// A short description for logs and metrics: "mount", "clone(CLONE_NEWNS|CLONE_NEWUSER)",
// "socket(AF_VSOCK)", "ioctl(TIOCSTI)", "personality(0x400000)". `args` are the six syscall
// arguments as the filter saw them.
std::string DescribeViolation(absl::string_view syscall, absl::Span<const uint64_t> args);

}  // namespace moat::sandbox
