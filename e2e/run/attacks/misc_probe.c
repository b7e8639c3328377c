// Smaller attacks that need a system call rather than a shell:
//   misc_probe sysv KEY          open the host's System V message queue/shm/semaphore with KEY
//   misc_probe flood N           N forbidden calls in a row (a flood of violations)
//   misc_probe priority          raise our priority above the host's (real-time, nice -20,
//                                oom_score_adj -1000, I/O real-time) and lift hard limits
//   misc_probe mknod DIR         create /dev/mem and a disk's device node in DIR and open them
//   misc_probe link FROM TO      hard-link a host file into a writable place
//   misc_probe inodes DIR N      create up to N empty files in DIR (inode exhaustion)
//   misc_probe ids               become another user or gain capabilities or id mappings
#define _GNU_SOURCE
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "report.h"

static int SysV(const char* key_text) {
  key_t key = (key_t)strtol(key_text, NULL, 0);
  TRY("msgget", msgget(key, 0), Expect);
  TRY("shmget", shmget(key, 0, 0), Expect);
  TRY("semget", semget(key, 0, 0), Expect);
  return Finish();
}

static int Flood(const char* count_text) {
  long n = strtol(count_text, NULL, 10), refused = 0;
  for (long i = 0; i < n; ++i) {
    if (mount("none", "/tmp", "tmpfs", 0, NULL) != 0) ++refused;
  }
  if (refused == n) {
    printf("blocked %ld mounts\n", refused);
  } else {
    Escaped("mount flood", "%ld of %ld mounts worked", n - refused, n);
  }
  return Finish();
}

static int WriteProc(const char* path, const char* value) {
  int fd = open(path, O_WRONLY);
  if (fd < 0) return -1;
  ssize_t n = write(fd, value, strlen(value));
  int e = errno;
  close(fd);
  errno = e;
  return n < 0 ? -1 : 0;
}

static int Priority(void) {
  struct sched_param sp = {.sched_priority = 1};
  TRY("SCHED_FIFO", sched_setscheduler(0, SCHED_FIFO, &sp), Expect);
  TRY("nice -20", setpriority(PRIO_PROCESS, 0, -20), Expect);
  TRY("oom_score_adj -1000", WriteProc("/proc/self/oom_score_adj", "-1000"), Expect);
  TRY("ioprio realtime",
      syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0, (1 << 13) | 0 /* RT, level 0 */),
      Expect);
  struct rlimit rl;
  getrlimit(RLIMIT_CORE, &rl);
  rl.rlim_max = RLIM_INFINITY;
  rl.rlim_cur = RLIM_INFINITY;
  TRY("raise RLIMIT_CORE", setrlimit(RLIMIT_CORE, &rl), Expect);
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_max = rl.rlim_cur = rl.rlim_max * 256;
  TRY("raise RLIMIT_NOFILE", setrlimit(RLIMIT_NOFILE, &rl), Expect);
  return Finish();
}

static int Mknod(const char* dir) {
  const struct {
    const char* name;
    mode_t type;
    unsigned major, minor;
  } nodes[] = {{"mem", S_IFCHR, 1, 1},
               {"kmsg", S_IFCHR, 1, 11},
               {"disk", S_IFBLK, 254, 0},
               {"sda", S_IFBLK, 8, 0}};
  for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); ++i) {
    char path[4096], what[64];
    snprintf(path, sizeof(path), "%s/%s", dir, nodes[i].name);
    snprintf(what, sizeof(what), "mknod %s", nodes[i].name);
    if (mknod(path, nodes[i].type | 0666, makedev(nodes[i].major, nodes[i].minor)) != 0) {
      Blocked(what, errno);
      continue;
    }
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
      Escaped(what, "created and opened a device node");
      close(fd);
    } else {
      Blocked(what, errno);  // created, but the mount is nodev
    }
    unlink(path);
  }
  return Finish();
}

static int Inodes(const char* dir, const char* count_text) {
  long n = strtol(count_text, NULL, 10), made = 0;
  char path[4096];
  int err = 0;
  for (; made < n; ++made) {
    snprintf(path, sizeof(path), "%s/i%ld", dir, made);
    int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0644);
    if (fd < 0) {
      err = errno;
      break;
    }
    close(fd);
  }
  if (made == n) {
    Escaped("inodes", "created all %ld files", n);
  } else {
    char what[64];
    snprintf(what, sizeof(what), "inodes after %ld files", made);
    Blocked(what, err);
  }
  return Finish();
}

static int Ids(void) {
  TRY("setuid 1000", syscall(SYS_setresuid, 1000, 1000, 1000), Expect);
  TRY("setgid 1000", syscall(SYS_setresgid, 1000, 1000, 1000), Expect);
  gid_t groups[1] = {0};
  TRY("setgroups", syscall(SYS_setgroups, 1, groups), Expect);
  TRY("rewrite uid_map", WriteProc("/proc/self/uid_map", "0 0 1\n"), Expect);
  TRY("setgroups allow", WriteProc("/proc/self/setgroups", "allow\n"), Expect);
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0xff, sizeof(data));
  TRY("capset all", syscall(SYS_capset, &header, data), Expect);
  TRY("ambient raise", prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0), Expect);
  TRY("clear no_new_privs", prctl(PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0), Expect);
  return Finish();
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "sysv") == 0) return SysV(argv[2]);
  if (argc == 3 && strcmp(argv[1], "flood") == 0) return Flood(argv[2]);
  if (argc == 2 && strcmp(argv[1], "priority") == 0) return Priority();
  if (argc == 3 && strcmp(argv[1], "mknod") == 0) return Mknod(argv[2]);
  if (argc == 4 && strcmp(argv[1], "link") == 0) {
    TRY("link", link(argv[2], argv[3]), Expect);
    return Finish();
  }
  if (argc == 2 && strcmp(argv[1], "ids") == 0) return Ids();
  if (argc == 4 && strcmp(argv[1], "inodes") == 0) return Inodes(argv[2], argv[3]);
  fprintf(stderr, "usage: misc_probe sysv|flood|priority|mknod|link|ids ...\n");
  return 2;
}
