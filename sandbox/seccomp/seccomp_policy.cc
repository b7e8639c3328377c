#include "sandbox/seccomp/seccomp_policy.h"

#include <fcntl.h>
#include <linux/personality.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace moat::sandbox {
namespace {

// Allowed unconditionally, grouped by what programs use them for. The spirit is Docker's default
// profile: what shells, python3, node, compilers, git and curl need. Names missing on an arch
// (open, fork, ... on aarch64) are skipped there by libseccomp.
// (clang-format would put one name per line.)
// clang-format off
constexpr absl::string_view kAllowed[] = {
    // Files: open, read, write, seek, sync.
    "close", "close_range", "read", "write", "readv",
    "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2", "lseek",
    "sendfile", "splice", "tee", "vmsplice", "copy_file_range", "readahead", "fadvise64",
    "fallocate", "truncate", "ftruncate", "fsync", "fdatasync", "sync", "syncfs",
    "sync_file_range", "flock", "fcntl", "dup", "dup2", "dup3",
    // Files: names, metadata, directories, extended attributes.
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "rename", "renameat",
    "renameat2", "rmdir", "unlink", "unlinkat", "link", "linkat", "symlink",
    "symlinkat", "readlink", "readlinkat", "chown",
    "fchown", "lchown", "fchownat", "umask", "utime", "utimes", "futimesat", "utimensat",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "memfd_create",
    "cachestat",
    // Waiting for many things: poll, epoll, eventfd, pipes, legacy AIO.
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "pipe", "pipe2",
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    // Memory.
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock",
    "mlock2", "munlock", "mlockall", "munlockall", "remap_file_pages", "pkey_alloc", "pkey_free",
    "pkey_mprotect", "get_mempolicy", "membarrier", "map_shadow_stack",
    // Processes: create, run, wait, signal. clone is below: its flags are filtered.
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill",
    "tkill", "tgkill", "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "getpid", "getppid",
    "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid", "restart_syscall",
    // Debugging and introspection of our own processes: the kernel's ptrace access checks, the
    // sandbox's pid namespace and its non-dumpable init keep these to what the code started.
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    // Stacking more restrictions is always harmless.
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    // Threads.
    "futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "set_tid_address",
    "set_robust_list", "get_robust_list", "rseq", "arch_prctl", "set_thread_area",
    "get_thread_area",
    // Scheduling and limits of our own processes.
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
    "sched_getscheduler", "sched_setscheduler", "sched_getattr", "sched_setattr",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "getpriority",
    "setpriority", "ioprio_get", "ioprio_set", "getrlimit", "setrlimit", "prlimit64", "getrusage",
    "times", "getcpu", "prctl",
    // Credentials (changing them still needs capabilities, which the sandbox does not grant).
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid",
    "setfsgid", "capget", "capset",
    // Signals.
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
    "signalfd4", "pause", "alarm",
    // Time: reading clocks, sleeping, timers. Setting clocks is a violation below.
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
    "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    // Sockets once made (socket and socketpair are below: their families are filtered).
    "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername", "sendto",
    "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "setsockopt",
    "getsockopt",
    // System V and POSIX IPC, private to the sandbox's IPC namespace.
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget",
    "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
    // System information.
    "uname", "sysinfo", "getrandom",
};

// Denied and reported: each one is a way out of the box, into the kernel's rarer corners, or a
// change to the host that a program running untrusted code has no business making.
constexpr absl::string_view kViolations[] = {
    // Namespaces and mounts: the sandbox's shape is fixed before the code runs.
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig",
    "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    // Kernel keyrings are not namespaced.
    "add_key", "request_key", "keyctl",
    // Large kernel attack surfaces with a history of privilege escalations.
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "fanotify_init", "lookup_dcookie",
    // Opening files by handle bypasses the mount namespace (the "shocker" escape).
    "open_by_handle_at", "name_to_handle_at",
    // Kernel modules and replacing the kernel.
    "init_module", "finit_module", "delete_module", "create_module", "get_kernel_syms",
    "query_module", "kexec_load", "kexec_file_load",
    // The machine itself: power, swap, accounting, clocks, kernel log, quotas, host names.
    "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "syslog", "quotactl", "quotactl_fd", "sethostname", "setdomainname", "vhangup",
    // Hardware ports, 16-bit segments and obsolete interfaces.
    "iopl", "ioperm", "modify_ldt", "uselib", "_sysctl", "nfsservctl",
};
// clang-format on

// Namespace flags that clone(2) accepts. CLONE_NEWTIME is absent on purpose: in clone(2) its
// bit (0x80) is part of the exit signal in the low byte, so only clone3 and unshare can ask for
// a time namespace, and both are denied already.
constexpr uint32_t kCloneNewFlags[] = {CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                       CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET};

struct Named {
  uint32_t value;
  absl::string_view name;
};

constexpr Named kCloneNewNames[] = {
    {CLONE_NEWNS, "CLONE_NEWNS"},     {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
    {CLONE_NEWUTS, "CLONE_NEWUTS"},   {CLONE_NEWIPC, "CLONE_NEWIPC"},
    {CLONE_NEWUSER, "CLONE_NEWUSER"}, {CLONE_NEWPID, "CLONE_NEWPID"},
    {CLONE_NEWNET, "CLONE_NEWNET"},
};

// Terminal ioctls that let one process act on another's terminal: TIOCSTI pushes bytes into
// the input queue (type commands into the shell that started us), TIOCLINUX can read the
// console's screen and select/paste text.
constexpr Named kDeniedIoctls[] = {{TIOCSTI, "TIOCSTI"}, {TIOCLINUX, "TIOCLINUX"}};

constexpr uint32_t kAllowedSocketFamilies[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};

// Families with a record of kernel bugs or a reach outside the sandbox's network namespace:
// vsock talks to the hypervisor, AF_ALG is the kernel crypto API, AF_PACKET sees raw frames,
// AF_KEY edits the IPsec database.
constexpr Named kViolatingSocketFamilies[] = {
    {AF_VSOCK, "AF_VSOCK"}, {AF_ALG, "AF_ALG"}, {AF_PACKET, "AF_PACKET"}, {AF_KEY, "AF_KEY"}};

// personality(2) values that change nothing dangerous: Linux, 32-bit uname, 2.6-style uname,
// and 0xffffffff, which only reads the current value.
constexpr uint32_t kHarmlessPersonalities[] = {
    PER_LINUX, PER_LINUX32, UNAME26, static_cast<uint32_t>(UNAME26) | PER_LINUX32, 0xffffffffu};

// The flags the kernel itself drops on a setuid exec (PER_CLEAR_ON_SETID) because they weaken a
// process's hardening: executable data, no ASLR, a mappable page zero. Asking for them is a
// violation; other odd values are refused quietly by the default.
constexpr uint32_t kDangerousPersonalityFlags[] = {READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE,
                                                   ADDR_COMPAT_LAYOUT, MMAP_PAGE_ZERO};

// Socket families are small numbers (AF_MAX is 46 in Linux 6.x); the EAFNOSUPPORT rules cover
// 0..63 and leave larger nonsense to the default.
constexpr int kSocketFamilyBits = 6;

constexpr uint32_t kAll32 = 0xffffffffu;

void CoverComplement(uint32_t prefix_mask, uint32_t prefix_value, int bit,
                     const std::vector<uint32_t>& members, std::vector<MaskedValue>& out) {
  if (bit < 0) return;  // the prefix is a whole value, and it is one of the excluded ones
  const uint32_t b = 1u << bit;
  std::vector<uint32_t> zeros;
  std::vector<uint32_t> ones;
  for (uint32_t v : members) ((v & b) ? ones : zeros).push_back(v);
  for (const auto& [side, sub] : {std::pair{0u, &zeros}, std::pair{b, &ones}}) {
    if (sub->empty()) {
      out.push_back({prefix_mask | b, prefix_value | side});
    } else {
      CoverComplement(prefix_mask | b, prefix_value | side, bit - 1, *sub, out);
    }
  }
}

// Calls with a file mode argument, and its index.
struct ModeArg {
  absl::string_view syscall;
  unsigned mode_index;
};
constexpr ModeArg kModeSettingCalls[] = {
    {"open", 2},     {"openat", 3}, {"creat", 1},   {"chmod", 1}, {"fchmod", 1},
    {"fchmodat", 2}, {"mkdir", 1},  {"mkdirat", 2}, {"mknod", 1}, {"mknodat", 2},
};

SyscallRule Rule(absl::string_view syscall, SyscallVerdict verdict, int errno_value = 0,
                 std::optional<ArgMatch> match = std::nullopt,
                 std::optional<ArgMatch> match2 = std::nullopt) {
  return SyscallRule{syscall, verdict, errno_value, match, match2};
}

const CreationCall* FindCreationCall(absl::string_view syscall) {
  for (const CreationCall& call : CreationCalls()) {
    if (call.syscall == syscall) return &call;
  }
  return nullptr;
}

std::vector<SyscallRule> BuildRules(bool guard_creation) {
  // What an allowed call becomes: with the guard, a call that adds a name is the guard's.
  auto allowed = [&](absl::string_view name) {
    return guard_creation && FindCreationCall(name) != nullptr ? SyscallVerdict::kSupervised
                                                               : SyscallVerdict::kAllow;
  };
  std::vector<SyscallRule> rules;
  for (absl::string_view name : kAllowed) rules.push_back(Rule(name, allowed(name)));
  for (absl::string_view name : kViolations) {
    rules.push_back(Rule(name, SyscallVerdict::kViolation, ViolationErrno(name)));
  }

  // clone3 passes its flags in memory, which seccomp cannot read; ENOSYS makes glibc (2.34+)
  // and other runtimes fall back to clone, whose flags we can check.
  rules.push_back(Rule("clone3", SyscallVerdict::kErrno, ENOSYS));

  // clone: allowed without namespace flags, a violation with any of them. The violation rules
  // overlap each other (same verdict) but never the allow rule.
  uint32_t all_new = 0;
  for (uint32_t flag : kCloneNewFlags) all_new |= flag;
  rules.push_back(Rule("clone", SyscallVerdict::kAllow, 0, ArgMatch{0, all_new, 0}));
  for (uint32_t flag : kCloneNewFlags) {
    rules.push_back(Rule("clone", SyscallVerdict::kViolation, ViolationErrno("clone"),
                         ArgMatch{0, flag, flag}));
  }

  // ioctl: every request but the denied ones, compared on the low 32 bits of cmd.
  std::vector<uint32_t> denied_ioctls;
  for (const Named& ioctl : kDeniedIoctls) {
    denied_ioctls.push_back(ioctl.value);
    rules.push_back(Rule("ioctl", SyscallVerdict::kViolation, ViolationErrno("ioctl"),
                         ArgMatch{1, kAll32, ioctl.value}));
  }
  for (const MaskedValue& p : ComplementPatterns(denied_ioctls)) {
    rules.push_back(Rule("ioctl", SyscallVerdict::kAllow, 0, ArgMatch{1, p.mask, p.value}));
  }

  // socket: ordinary families allowed, dangerous ones a violation, the rest EAFNOSUPPORT.
  // (Every rule compares the whole low 32 bits: the EAFNOSUPPORT patterns require bits 6..31 to
  // be zero.)
  std::vector<uint32_t> named_families;
  for (uint32_t family : kAllowedSocketFamilies) {
    named_families.push_back(family);
    rules.push_back(Rule("socket", SyscallVerdict::kAllow, 0, ArgMatch{0, kAll32, family}));
  }
  for (const Named& family : kViolatingSocketFamilies) {
    named_families.push_back(family.value);
    rules.push_back(Rule("socket", SyscallVerdict::kViolation, ViolationErrno("socket"),
                         ArgMatch{0, kAll32, family.value}));
  }
  for (const MaskedValue& p : ComplementPatterns(named_families, kSocketFamilyBits)) {
    rules.push_back(
        Rule("socket", SyscallVerdict::kErrno, EAFNOSUPPORT, ArgMatch{0, p.mask, p.value}));
  }
  // socketpair only works for AF_UNIX; other families are refused by the default (EPERM)
  // before the kernel instantiates a socket of that family.
  rules.push_back(Rule("socketpair", SyscallVerdict::kAllow, 0, ArgMatch{0, kAll32, AF_UNIX}));

  // Calls that set a file mode: no set-user-ID or set-group-ID bit (like systemd's
  // RestrictSUIDSGID). Inside, mounts are nosuid anyway, but a writable host directory
  // (--workspace, allowWrite) would keep the bit, and through an idmapped bind the file would
  // belong to the directory's owner, root included. open and openat are matched on their mode
  // argument alone (glibc passes 0 without O_CREAT); openat2 keeps its mode in memory, out of
  // seccomp's reach, so it gets ENOSYS and callers fall back to openat.
  for (const ModeArg& call : kModeSettingCalls) {
    const ArgMatch clean_mode{call.mode_index, S_ISUID | S_ISGID, 0};
    const CreationCall* creation = FindCreationCall(call.syscall);
    if (guard_creation && creation != nullptr && creation->flags >= 0) {
      // open, openat: the guard's only when they may create.
      const unsigned flags = static_cast<unsigned>(creation->flags);
      rules.push_back(
          Rule(call.syscall, SyscallVerdict::kAllow, 0, clean_mode, ArgMatch{flags, O_CREAT, 0}));
      rules.push_back(Rule(call.syscall, SyscallVerdict::kSupervised, 0, clean_mode,
                           ArgMatch{flags, O_CREAT, O_CREAT}));
    } else {
      rules.push_back(Rule(call.syscall, allowed(call.syscall), 0, clean_mode));
    }
    rules.push_back(Rule(call.syscall, SyscallVerdict::kViolation, EPERM,
                         ArgMatch{call.mode_index, S_ISUID, S_ISUID}));
    rules.push_back(Rule(call.syscall, SyscallVerdict::kViolation, EPERM,
                         ArgMatch{call.mode_index, S_ISUID | S_ISGID, S_ISGID}));
  }
  rules.push_back(Rule("openat2", SyscallVerdict::kErrno, ENOSYS));

  // personality: the harmless values allowed; a dangerous flag a violation. Bit 31 must be clear
  // in the violation patterns so that they never match the 0xffffffff query.
  for (uint32_t persona : kHarmlessPersonalities) {
    rules.push_back(Rule("personality", SyscallVerdict::kAllow, 0, ArgMatch{0, kAll32, persona}));
  }
  for (uint32_t flag : kDangerousPersonalityFlags) {
    rules.push_back(Rule("personality", SyscallVerdict::kViolation, ViolationErrno("personality"),
                         ArgMatch{0, flag | 0x80000000u, flag}));
  }
  return rules;
}

absl::string_view NameOf(absl::Span<const Named> table, uint32_t value) {
  for (const Named& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "";
}

}  // namespace

const std::vector<SyscallRule>& SandboxSyscallRules(bool guard_creation) {
  static const std::vector<SyscallRule>* const rules =
      new std::vector<SyscallRule>(BuildRules(false));
  static const std::vector<SyscallRule>* const guarded =
      new std::vector<SyscallRule>(BuildRules(true));
  return guard_creation ? *guarded : *rules;
}

std::vector<MaskedValue> ComplementPatterns(absl::Span<const uint32_t> excluded, int bits) {
  // Values below 2^bits are those whose bits [bits, 32) are all zero: that is the root prefix.
  const uint32_t high_mask = bits >= 32 ? 0 : ~((1u << bits) - 1);
  std::vector<uint32_t> members;
  for (uint32_t v : excluded) {
    if ((v & high_mask) == 0) members.push_back(v);  // values outside the range exclude nothing
  }
  if (members.empty()) return {MaskedValue{high_mask, 0}};
  std::vector<MaskedValue> out;
  CoverComplement(high_mask, 0, bits - 1, members, out);
  return out;
}

absl::Span<const CreationCall> CreationCalls() {
  using K = CreationCall::Kind;
  static constexpr CreationCall kCalls[] = {
      {.syscall = "open", .kind = K::kOpen, .path = 0, .flags = 1, .mode = 2},
      {.syscall = "creat",
       .kind = K::kOpen,
       .path = 0,
       .mode = 1,
       .fixed_flags = O_CREAT | O_WRONLY | O_TRUNC},
      {.syscall = "openat", .kind = K::kOpen, .dirfd = 0, .path = 1, .flags = 2, .mode = 3},
      {.syscall = "mkdir", .kind = K::kMkdir, .path = 0, .mode = 1},
      {.syscall = "mkdirat", .kind = K::kMkdir, .dirfd = 0, .path = 1, .mode = 2},
      {.syscall = "mknod", .kind = K::kMknod, .path = 0, .mode = 1, .dev = 2},
      {.syscall = "mknodat", .kind = K::kMknod, .dirfd = 0, .path = 1, .mode = 2, .dev = 3},
      {.syscall = "symlink", .kind = K::kSymlink, .path = 1, .old_path = 0},
      {.syscall = "symlinkat", .kind = K::kSymlink, .dirfd = 1, .path = 2, .old_path = 0},
      {.syscall = "link", .kind = K::kLink, .path = 1, .old_path = 0},
      {.syscall = "linkat",
       .kind = K::kLink,
       .dirfd = 2,
       .path = 3,
       .old_dirfd = 0,
       .old_path = 1,
       .flags = 4},
      {.syscall = "rename", .kind = K::kRename, .path = 1, .old_path = 0},
      {.syscall = "renameat",
       .kind = K::kRename,
       .dirfd = 2,
       .path = 3,
       .old_dirfd = 0,
       .old_path = 1},
      {.syscall = "renameat2",
       .kind = K::kRename,
       .dirfd = 2,
       .path = 3,
       .old_dirfd = 0,
       .old_path = 1,
       .flags = 4},
  };
  return kCalls;
}

int ViolationErrno(absl::string_view syscall) { return syscall == "socket" ? EAFNOSUPPORT : EPERM; }

std::string DescribeViolation(absl::string_view syscall, absl::Span<const uint64_t> args) {
  const uint32_t arg0 = args.size() > 0 ? static_cast<uint32_t>(args[0]) : 0;
  const uint32_t arg1 = args.size() > 1 ? static_cast<uint32_t>(args[1]) : 0;
  if (syscall == "clone") {
    std::vector<absl::string_view> flags;
    for (const Named& flag : kCloneNewNames) {
      if (arg0 & flag.value) flags.push_back(flag.name);
    }
    if (!flags.empty()) return absl::StrCat("clone(", absl::StrJoin(flags, "|"), ")");
  } else if (syscall == "socket") {
    absl::string_view family = NameOf(kViolatingSocketFamilies, arg0);
    return family.empty() ? absl::StrCat("socket(family ", arg0, ")")
                          : absl::StrCat("socket(", family, ")");
  } else if (syscall == "ioctl") {
    absl::string_view request = NameOf(kDeniedIoctls, arg1);
    return request.empty() ? absl::StrFormat("ioctl(0x%x)", arg1)
                           : absl::StrCat("ioctl(", request, ")");
  } else if (syscall == "personality") {
    return absl::StrFormat("personality(0x%x)", arg0);
  }
  for (const ModeArg& call : kModeSettingCalls) {
    if (call.syscall == syscall && args.size() > call.mode_index) {
      return absl::StrFormat("%s(mode 0%o: set-user-ID or set-group-ID bit)", syscall,
                             static_cast<uint32_t>(args[call.mode_index]) & 07777);
    }
  }
  return std::string(syscall);
}

}  // namespace moat::sandbox
