#include "sandbox/seccomp/seccomp_filter.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sandbox/seccomp/seccomp_policy.h"
#include "util/errno_status.h"
#include "util/unique_fd.h"

namespace moat::sandbox {
namespace {

using FilterCtx = std::unique_ptr<void, decltype(&seccomp_release)>;

// What a syscall without a matching rule gets.
constexpr uint32_t kDefaultAction = SCMP_ACT_ERRNO(EPERM);

// libseccomp returns -errno when SCMP_FLTATR_API_SYSRAWRC is set (it is, below).
absl::Status SeccompStatus(absl::string_view what, int rc) {
  return ErrnoStatus(absl::StrCat("libseccomp: ", what), -rc);
}

uint32_t ActionFor(const SyscallRule& rule, bool notify_violations) {
  switch (rule.verdict) {
    case SyscallVerdict::kAllow:
      return SCMP_ACT_ALLOW;
    case SyscallVerdict::kViolation:
      return notify_violations ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(rule.errno_value);
    case SyscallVerdict::kErrno:
      return SCMP_ACT_ERRNO(rule.errno_value);
    case SyscallVerdict::kSupervised:
      return SCMP_ACT_NOTIFY;
  }
  return SCMP_ACT_ERRNO(EPERM);
}

absl::Status AddRule(scmp_filter_ctx ctx, const SyscallRule& rule, bool notify_violations) {
  const std::string name(rule.syscall);
  // Resolve in native numbering: libseccomp translates native numbers (and its pseudo numbers
  // for syscalls the native arch lacks) to the filter's arch, and drops rules for syscalls the
  // filter's arch does not have. Passing an aarch64 number here would be read as an x86-64 one.
  const int nr = seccomp_syscall_resolve_name(name.c_str());
  if (nr == __NR_SCMP_ERROR) {
    return absl::InternalError(
        absl::StrCat("seccomp policy names syscall \"", name,
                     "\", which this libseccomp does not know; fix the name in seccomp_policy.cc"));
  }
  const uint32_t action = ActionFor(rule, notify_violations);
  // libseccomp refuses (EACCES) a rule whose action is the filter's default; such a rule
  // changes nothing, since calls it would match get the default anyway.
  if (action == kDefaultAction) return absl::OkStatus();
  // For SCMP_CMP_MASKED_EQ, datum_a is the mask and datum_b the value.
  struct scmp_arg_cmp cmps[2];
  unsigned n = 0;
  for (const std::optional<ArgMatch>& m : {rule.match, rule.match2}) {
    if (m.has_value()) cmps[n++] = {m->index, SCMP_CMP_MASKED_EQ, m->mask, m->value};
  }
  int rc = seccomp_rule_add_array(ctx, action, nr, n, n > 0 ? cmps : nullptr);
  if (rc < 0) return SeccompStatus(absl::StrCat("add rule for \"", name, "\""), rc);
  return absl::OkStatus();
}

// libseccomp 2.5.4 can only export to a file descriptor; a memfd keeps it in memory.
absl::StatusOr<std::vector<struct sock_filter>> ExportBpf(scmp_filter_ctx ctx) {
  UniqueFd fd(memfd_create("moat-seccomp-bpf", MFD_CLOEXEC));
  if (!fd) return ErrnoStatus("create memfd for the seccomp program");
  int rc = seccomp_export_bpf(ctx, fd.get());
  if (rc < 0) return SeccompStatus("export the BPF program", rc);
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  if (size < 0) return ErrnoStatus("measure the exported seccomp program");
  if (size == 0 || size % sizeof(struct sock_filter) != 0 ||
      size / sizeof(struct sock_filter) > BPF_MAXINSNS) {
    return absl::InternalError(absl::StrCat("libseccomp exported ", size,
                                            " bytes, which is not a loadable BPF program (1 to ",
                                            BPF_MAXINSNS, " 8-byte instructions)"));
  }
  std::vector<struct sock_filter> instructions(size / sizeof(struct sock_filter));
  const ssize_t got = pread(fd.get(), instructions.data(), size, 0);
  if (got != size)
    return ErrnoStatus("read back the exported seccomp program", got < 0 ? errno : EIO);
  return instructions;
}

// A raw system call that touches nothing but registers. glibc's syscall() and prctl() store
// errno in thread-local storage; in a child made by a raw clone with CLONE_VM that storage is
// the parent thread's. Returns the kernel's result: >= 0, or -errno.
long RawSyscall(long nr, long a0, long a1, long a2, long a3 = 0, long a4 = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 asm("r10") = a3;
  register long r8 asm("r8") = a4;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a0), "S"(a1), "d"(a2), "r"(r10), "r"(r8)
               : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 asm("x8") = nr;
  register long x0 asm("x0") = a0;
  register long x1 asm("x1") = a1;
  register long x2 asm("x2") = a2;
  register long x3 asm("x3") = a3;
  register long x4 asm("x4") = a4;
  asm volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory");
  return x0;
#else
#error "moat supports x86-64 and aarch64"
#endif
}

}  // namespace

Arch NativeArch() {
#if defined(__x86_64__)
  return Arch::kX86_64;
#elif defined(__aarch64__)
  return Arch::kAarch64;
#else
#error "moat supports x86-64 and aarch64"
#endif
}

absl::string_view ArchName(Arch arch) { return arch == Arch::kX86_64 ? "x86_64" : "aarch64"; }

uint32_t AuditArch(Arch arch) {
  // libseccomp's SCMP_ARCH_* tokens for these arches are these same AUDIT_ARCH_* values.
  return arch == Arch::kX86_64 ? AUDIT_ARCH_X86_64 : AUDIT_ARCH_AARCH64;
}

absl::StatusOr<int> SyscallNumber(Arch arch, absl::string_view name) {
  const int nr = seccomp_syscall_resolve_name_arch(AuditArch(arch), std::string(name).c_str());
  if (nr < 0) {
    return absl::NotFoundError(absl::StrCat("no syscall named \"", name, "\" on ", ArchName(arch)));
  }
  return nr;
}

std::string SyscallName(Arch arch, int nr) {
  std::unique_ptr<char, decltype(&free)> name(seccomp_syscall_resolve_num_arch(AuditArch(arch), nr),
                                              &free);
  return name ? std::string(name.get()) : std::string();
}

absl::StatusOr<SeccompProgram> SeccompProgram::Build(const SeccompOptions& options) {
  if (options.guard_creation && !options.notify_violations) {
    return absl::InvalidArgumentError(
        "a seccomp program that guards creation must notify (SeccompOptions::notify_violations)");
  }
  FilterCtx ctx(seccomp_init(kDefaultAction), &seccomp_release);
  if (ctx == nullptr) return absl::ResourceExhaustedError("libseccomp: seccomp_init failed");
  int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_API_SYSRAWRC, 1);
  if (rc < 0) return SeccompStatus("ask for raw error codes", rc);

  // One arch per program: the target's. The x86-64 program also kills x32 calls (same
  // AUDIT_ARCH, nr | 0x40000000): libseccomp adds that check when x32 is not in the filter.
  const uint32_t token = AuditArch(options.arch);
  if (token != seccomp_arch_native()) {
    rc = seccomp_arch_add(ctx.get(), token);
    if (rc < 0) return SeccompStatus(absl::StrCat("add arch ", ArchName(options.arch)), rc);
    rc = seccomp_arch_remove(ctx.get(), SCMP_ARCH_NATIVE);
    if (rc < 0) return SeccompStatus("remove the native arch", rc);
  }
  // A foreign-arch syscall is never a mistake: it is a way around the filter's numbering.
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc < 0) return SeccompStatus("set the bad-arch action", rc);
  // A binary tree over ~300 syscalls: about 9 comparisons per syscall instead of up to 300.
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2);
  if (rc < 0) return SeccompStatus("select binary-tree optimization", rc);

  for (const SyscallRule& rule : SandboxSyscallRules(options.guard_creation)) {
    absl::Status added = AddRule(ctx.get(), rule, options.notify_violations);
    if (!added.ok()) return added;
  }
  absl::StatusOr<std::vector<struct sock_filter>> instructions = ExportBpf(ctx.get());
  if (!instructions.ok()) return instructions.status();
  return SeccompProgram(*std::move(instructions), options.arch, options.notify_violations,
                        options.guard_creation);
}

SeccompProgram::SeccompProgram(std::vector<struct sock_filter> instructions, Arch arch,
                               bool notifies, bool guards_creation)
    : instructions_(std::move(instructions)),
      arch_(arch),
      notifies_(notifies),
      guards_creation_(guards_creation) {
  PointFprogAtInstructions();
}

SeccompProgram::SeccompProgram(const SeccompProgram& other)
    : instructions_(other.instructions_),
      arch_(other.arch_),
      notifies_(other.notifies_),
      guards_creation_(other.guards_creation_) {
  PointFprogAtInstructions();
}

SeccompProgram& SeccompProgram::operator=(const SeccompProgram& other) {
  if (this != &other) {
    instructions_ = other.instructions_;
    arch_ = other.arch_;
    notifies_ = other.notifies_;
    guards_creation_ = other.guards_creation_;
    PointFprogAtInstructions();
  }
  return *this;
}

SeccompProgram::SeccompProgram(SeccompProgram&& other) noexcept
    : instructions_(std::move(other.instructions_)),
      arch_(other.arch_),
      notifies_(other.notifies_),
      guards_creation_(other.guards_creation_) {
  PointFprogAtInstructions();
  other.PointFprogAtInstructions();
}

SeccompProgram& SeccompProgram::operator=(SeccompProgram&& other) noexcept {
  if (this != &other) {
    instructions_ = std::move(other.instructions_);
    arch_ = other.arch_;
    notifies_ = other.notifies_;
    guards_creation_ = other.guards_creation_;
    PointFprogAtInstructions();
    other.PointFprogAtInstructions();
  }
  return *this;
}

void SeccompProgram::PointFprogAtInstructions() {
  fprog_.len = static_cast<unsigned short>(instructions_.size());
  fprog_.filter = instructions_.empty() ? nullptr : instructions_.data();
}

int InstallSeccompProgram(const struct sock_fprog* program, bool want_listener) {
  if (program == nullptr || program->filter == nullptr || program->len == 0) return -EINVAL;
  // Without no_new_privs, an unprivileged caller cannot install a filter, and a setuid binary
  // run later could be confused by one; with it, exec can never gain privileges.
  long rc = RawSyscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  if (rc < 0) return static_cast<int>(rc);
  const unsigned long flags = want_listener ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
  rc = RawSyscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, static_cast<long>(flags),
                  reinterpret_cast<long>(program));
  if (rc < 0) return static_cast<int>(rc);
  return want_listener ? static_cast<int>(rc) : 0;
}

}  // namespace moat::sandbox
