// Makes one forbidden system call per name given on the command line, with arguments that would
// do something if the call were allowed, and reports how each one failed.
//   syscall_probe mount unshare-user bpf ...
//   syscall_probe --list      prints every probe name
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "report.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif

// A raw clone with `flags`; the child, if any, exits at once.
static long CloneWith(unsigned long flags) {
  long pid = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  return pid;
}

static long Clone3With(unsigned long long flags) {
  struct clone_args args;
  memset(&args, 0, sizeof(args));
  args.flags = flags;
  args.exit_signal = SIGCHLD;
  long pid = syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  return pid;
}

static long OpenByHandle(void) {
  // A handle of the shape "shocker" used: ext4's (inode 2, the root directory), opened relative
  // to a descriptor in our mount namespace. With the call allowed the kernel would open the
  // file system's root, bypassing the mount namespace's view.
  struct {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[8];
  } h = {8, 1, {2, 0, 0, 0, 0, 0, 0, 0}};
  int dirfd = open("/etc", O_RDONLY | O_DIRECTORY);
  long rc = syscall(SYS_open_by_handle_at, dirfd, &h, O_RDONLY);
  int e = errno;
  close(dirfd);
  errno = e;
  return rc;
}

static long NameToHandle(void) {
  struct {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[128];
  } h = {128, 0, {0}};
  int mount_id;
  return syscall(SYS_name_to_handle_at, AT_FDCWD, "/etc", &h, &mount_id, 0);
}

static long Bpf(void) {
  union bpf_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 4;
  attr.max_entries = 1;
  return syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr));
}

static long PerfEventOpen(void) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  return syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
}

static long IoUringSetup(void) {
  unsigned char params[120];  // struct io_uring_params; zeroed means "defaults"
  memset(params, 0, sizeof(params));
  return syscall(SYS_io_uring_setup, 8, params);
}

static long InitModule(void) {
  static const char image[64] = "\177ELF";  // not a module: the call must fail before the check
  return syscall(SYS_init_module, image, sizeof(image), "");
}

static long FinitModule(void) {
  int fd = open("/dev/null", O_RDONLY);
  long rc = syscall(SYS_finit_module, fd, "", 0);
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

static long Setns(void) {
  int fd = open("/proc/self/ns/net", O_RDONLY);
  long rc = syscall(SYS_setns, fd, 0);
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

static long ClockSettime(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);  // setting the clock to itself: harmless if it worked
  return syscall(SYS_clock_settime, CLOCK_REALTIME, &now);
}

static long Syslog(void) {
  static char buf[4096];
  return syscall(SYS_syslog, 3 /* SYSLOG_ACTION_READ_ALL */, buf, sizeof(buf));
}

static long MoveMount(void) {
  return syscall(SYS_move_mount, AT_FDCWD, "/tmp", AT_FDCWD, "/etc", 0);
}

static long MountSetattr(void) {
  // Would make / writable again (attr_clr MOUNT_ATTR_RDONLY).
  struct {
    unsigned long long attr_set, attr_clr, propagation, userns_fd;
  } attr = {0, 0x1, 0, 0};
  return syscall(SYS_mount_setattr, AT_FDCWD, "/", 0x8000 /* AT_RECURSIVE */, &attr, sizeof(attr));
}

#if defined(__x86_64__)
static long ModifyLdt(void) {
  static char buf[16];
  return syscall(SYS_modify_ldt, 0, buf, sizeof(buf));
}
#endif

struct Probe {
  const char* name;
  long (*run)(void);
};

#define P(n, expr) \
  static long Run_##n(void) { return (expr); }
P(mount, mount("none", "/etc", "tmpfs", 0, NULL))
P(remount, mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL))
P(umount2, umount2("/root", MNT_DETACH))
P(pivot_root, syscall(SYS_pivot_root, "/tmp", "/tmp"))
P(chroot, chroot("/tmp"))
P(unshare_user, unshare(CLONE_NEWUSER))
P(unshare_mnt, unshare(CLONE_NEWNS))
P(unshare_pid, unshare(CLONE_NEWPID))
P(unshare_net, unshare(CLONE_NEWNET))
P(unshare_uts, unshare(CLONE_NEWUTS))
P(unshare_ipc, unshare(CLONE_NEWIPC))
P(unshare_cgroup, unshare(CLONE_NEWCGROUP))
P(unshare_time, unshare(CLONE_NEWTIME))
P(clone_newuser, CloneWith(CLONE_NEWUSER))
P(clone_newns, CloneWith(CLONE_NEWNS))
P(clone_newpid, CloneWith(CLONE_NEWPID))
P(clone_newnet, CloneWith(CLONE_NEWNET))
P(clone3_newuser, Clone3With(CLONE_NEWUSER))
P(setns, Setns())
P(keyctl, syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0))
P(add_key, syscall(SYS_add_key, "user", "moat-e2e", "x", 1, KEY_SPEC_PROCESS_KEYRING))
P(request_key, syscall(SYS_request_key, "user", "moat-e2e", NULL, KEY_SPEC_PROCESS_KEYRING))
P(bpf, Bpf())
P(perf_event_open, PerfEventOpen())
P(userfaultfd, syscall(SYS_userfaultfd, O_CLOEXEC))
P(io_uring_setup, IoUringSetup())
P(open_by_handle_at, OpenByHandle())
P(name_to_handle_at, NameToHandle())
P(init_module, InitModule())
P(finit_module, FinitModule())
P(delete_module, syscall(SYS_delete_module, "moat_e2e_none", O_NONBLOCK))
P(kexec_load, syscall(SYS_kexec_load, 0, 0, NULL, 0))
P(kexec_file_load, syscall(SYS_kexec_file_load, -1, -1, 0, "", 4 /* NO_INITRAMFS */))
P(reboot,
  syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2, LINUX_REBOOT_CMD_CAD_ON, NULL))
P(swapon, swapon("/dev/null", 0))
P(clock_settime, ClockSettime())
P(sethostname, sethostname("pwned", 5))
P(syslog, Syslog())
#if defined(__x86_64__)  // x86's port I/O and LDT: no such calls on aarch64
P(iopl, syscall(SYS_iopl, 3))
P(ioperm, syscall(SYS_ioperm, 0x80, 1, 1))
P(modify_ldt, ModifyLdt())
#endif
P(acct, acct("/tmp/acct"))
P(fsopen, syscall(SYS_fsopen, "tmpfs", 0))
P(open_tree, syscall(SYS_open_tree, AT_FDCWD, "/", 1 /* OPEN_TREE_CLONE */))
P(move_mount, MoveMount())
P(mount_setattr, MountSetattr())
P(fanotify_init, syscall(SYS_fanotify_init, 0, O_RDONLY))
P(personality, personality(READ_IMPLIES_EXEC))
P(socket_vsock, socket(AF_VSOCK, SOCK_STREAM, 0))
P(socket_packet, socket(AF_PACKET, SOCK_RAW, 0))
P(socket_alg, socket(AF_ALG, SOCK_SEQPACKET, 0))
#undef P

#define E(n) {#n, Run_##n},
#if defined(__x86_64__)
#define X86(n) E(n)
#else
#define X86(n)
#endif
// clang-format off
static const struct Probe kProbes[] = {
    E(mount) E(remount) E(umount2) E(pivot_root) E(chroot) E(unshare_user) E(unshare_mnt)
    E(unshare_pid) E(unshare_net) E(unshare_uts) E(unshare_ipc) E(unshare_cgroup) E(unshare_time)
    E(clone_newuser) E(clone_newns) E(clone_newpid) E(clone_newnet) E(clone3_newuser) E(setns)
    E(keyctl) E(add_key) E(request_key) E(bpf) E(perf_event_open) E(userfaultfd)
    E(io_uring_setup) E(open_by_handle_at) E(name_to_handle_at) E(init_module) E(finit_module)
    E(delete_module) E(kexec_load) E(kexec_file_load) E(reboot) E(swapon) E(clock_settime)
    E(sethostname) E(syslog) X86(iopl) X86(ioperm) E(acct) E(fsopen) E(open_tree) E(move_mount)
    E(mount_setattr) E(fanotify_init) X86(modify_ldt) E(personality) E(socket_vsock)
    E(socket_packet) E(socket_alg)};
// clang-format on
#undef X86
#undef E

int main(int argc, char** argv) {
  const size_t n = sizeof(kProbes) / sizeof(kProbes[0]);
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < n; ++i) printf("%s\n", kProbes[i].name);
    return 0;
  }
  for (int a = 1; a < argc; ++a) {
    size_t i = 0;
    while (i < n && strcmp(kProbes[i].name, argv[a]) != 0) ++i;
    if (i == n) {
      fprintf(stderr, "syscall_probe: unknown probe \"%s\"\n", argv[a]);
      return 2;
    }
    TRY(argv[a], kProbes[i].run(), Expect);
  }
  return Finish();
}
