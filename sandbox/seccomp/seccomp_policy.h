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
  // Handed to the creation guard (creation_guard.h), which makes the call itself or refuses it;
  // only in programs built with SeccompOptions::guard_creation. Always a notification.
  kSupervised,
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
  int errno_value = 0;             // kViolation and kErrno
  std::optional<ArgMatch> match;   // none: the rule covers every call
  std::optional<ArgMatch> match2;  // a second argument that must match too
};

// The whole policy. Anything without a matching rule, including syscall numbers the policy has
// never heard of, gets the filter's default, ERRNO(EPERM). Rules for one syscall never overlap
// with different verdicts: libseccomp gives no guarantee about which of two overlapping argument
// rules it tests first, and an unconditional rule silently overrides the conditional ones.
//
// With `guard_creation`, the calls of CreationCalls() that would be allowed are kSupervised
// instead (open and openat only with O_CREAT); their violations stay violations.
const std::vector<SyscallRule>& SandboxSyscallRules(bool guard_creation = false);

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

// Calls that add a name to a directory, and where their arguments are. With a writable host
// directory in the sandbox, the filter (SeccompOptions::guard_creation) hands each of them to
// the creation guard (creation_guard.h), which makes the name itself unless it is protected.
// open and openat only when they may create (O_CREAT); openat2 is ENOSYS already. Indexes are -1
// where the call has no such argument (a missing dirfd means AT_FDCWD).
struct CreationCall {
  enum class Kind { kOpen, kMkdir, kMknod, kSymlink, kLink, kRename };
  absl::string_view syscall;
  Kind kind;
  int dirfd = -1;       // the directory of the new name
  int path = -1;        // the new name
  int old_dirfd = -1;   // link, rename: the directory of the existing name
  int old_path = -1;    // link, rename: the existing name; symlink: the link's contents
  int flags = -1;       // open: its flags; linkat, renameat2: theirs
  int mode = -1;        // open, mkdir, mknod
  int dev = -1;         // mknod
  int fixed_flags = 0;  // creat: the open flags it implies
};
absl::Span<const CreationCall> CreationCalls();

// A short description for logs and metrics: "mount", "clone(CLONE_NEWNS|CLONE_NEWUSER)",
// "socket(AF_VSOCK)", "ioctl(TIOCSTI)", "personality(0x400000)". `args` are the six syscall
// arguments as the filter saw them.
std::string DescribeViolation(absl::string_view syscall, absl::Span<const uint64_t> args);

}  // namespace moat::sandbox
