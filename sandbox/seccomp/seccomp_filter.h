// The seccomp filter: built once in the parent with libseccomp from the rules in
// seccomp_policy.h, exported as raw BPF, and installed in the sandboxed child right before
// execve by an async-signal-safe function.
//
// What the program does, on either arch:
//   foreign arch (i386 or x32 on x86-64, arm on arm64)    -> KILL_PROCESS
//   allowed syscall (or allowed argument)                 -> ALLOW
//   violation (mount, unshare, clone(CLONE_NEW*), ...)    -> USER_NOTIF if notifying, else
//                                                            ERRNO(EPERM), or ERRNO(EAFNOSUPPORT)
//                                                            for socket families: the answer
//                                                            the supervisor would give
//   clone3                                                -> ERRNO(ENOSYS)
//   socket of another family below 64                     -> ERRNO(EAFNOSUPPORT)
//   anything else                                         -> ERRNO(EPERM)
// The rules themselves are in seccomp_policy.cc.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace moat::sandbox {

enum class Arch { kX86_64, kAarch64 };

// The arch this binary runs on.
Arch NativeArch();

// "x86_64" or "aarch64".
absl::string_view ArchName(Arch arch);

// The AUDIT_ARCH_* value the kernel puts in seccomp_data.arch for native syscalls of `arch`.
uint32_t AuditArch(Arch arch);

// The syscall number of `name` on `arch` (e.g. openat: 257 on x86-64, 56 on aarch64).
// NotFound if the arch has no such syscall.
absl::StatusOr<int> SyscallNumber(Arch arch, absl::string_view name);

// The name of syscall `nr` on `arch`, or "" if libseccomp does not know it.
std::string SyscallName(Arch arch, int nr);

struct SeccompOptions {
  Arch arch = NativeArch();
  // Violations become SCMP_ACT_NOTIFY for a supervisor holding the listener; without it they
  // are ERRNO with the same errno the supervisor would answer.
  bool notify_violations = true;
  // The calls that add a name to a directory (CreationCalls()) notify too, for the creation
  // guard (creation_guard.h) to make them; needs notify_violations.
  bool guard_creation = false;
};

// A finished BPF program. Copyable and movable; fprog() always points into this object.
class SeccompProgram {
 public:
  // Builds the program with libseccomp (allocates; call it in the parent, once per policy).
  static absl::StatusOr<SeccompProgram> Build(const SeccompOptions& options);
  // The same program, compiled when moat was built (no libseccomp work at run time).
  static absl::StatusOr<SeccompProgram> Precompiled(const SeccompOptions& options);

  SeccompProgram(const SeccompProgram& other);
  SeccompProgram& operator=(const SeccompProgram& other);
  SeccompProgram(SeccompProgram&& other) noexcept;
  SeccompProgram& operator=(SeccompProgram&& other) noexcept;

  // What seccomp(2) takes. Points into this object; valid while it lives and is not assigned to.
  const struct sock_fprog* fprog() const { return &fprog_; }
  absl::Span<const struct sock_filter> instructions() const { return instructions_; }
  Arch arch() const { return arch_; }
  // True if violations notify: install it with a listener (want_listener = true), or they fail
  // with ENOSYS instead of EPERM because nobody is listening.
  bool notifies() const { return notifies_; }
  // True if creating calls notify for the creation guard (SeccompOptions::guard_creation).
  bool guards_creation() const { return guards_creation_; }

 private:
  SeccompProgram(std::vector<struct sock_filter> instructions, Arch arch, bool notifies,
                 bool guards_creation);
  void PointFprogAtInstructions();

  std::vector<struct sock_filter> instructions_;
  struct sock_fprog fprog_ = {};
  Arch arch_;
  bool notifies_;
  bool guards_creation_;
};

// Async-signal-safe: no allocation, no locks, only prctl(2) and seccomp(2) on ready data, so it
// may run in a child made by a raw clone of a multi-threaded process.
//
// Sets no_new_privs itself (harmless if the caller already did; seccomp(2) refuses a filter
// without it unless the caller has CAP_SYS_ADMIN), then installs `program`. The program must be
// built for the running arch: a foreign-arch program kills the process at its next syscall.
//
// If `want_listener`, uses SECCOMP_FILTER_FLAG_NEW_LISTENER and returns the listener fd (>= 0,
// close-on-exec). Hand it to the supervisor (SCM_RIGHTS) and close it before running untrusted
// code: whoever holds it answers the notifications, and could let a denied call through.
// Otherwise returns 0. Returns -errno on failure.
int InstallSeccompProgram(const struct sock_fprog* program, bool want_listener);

}  // namespace moat::sandbox
