// Reaching the sandbox's init (pid 1), which holds the socket to the supervisor, and a control
// that debugging one's own child still works.
//   ptrace_probe init    every way to inspect or control pid 1 must fail
//   ptrace_probe child   tracing our own child must work (prints "ok trace own child")
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "report.h"

// Permission errors are what a refusal looks like; EFAULT or EBADF would mean the permission
// check passed and only our made-up address or descriptor was wrong.
static void ExpectDenied(const char* what, long rc, int err) {
  if (rc >= 0) {
    Escaped(what, "returned %ld", rc);
  } else if (err == EPERM || err == EACCES) {
    Blocked(what, err);
  } else {
    Escaped(what, "the permission check passed (failed later with %s)", ErrnoName(err));
  }
}

static void OpenDenied(const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd >= 0) {
    Escaped(path, "opened");
    close(fd);
    return;
  }
  Blocked(path, errno);
}

static int Init(void) {
  TRY("ptrace-attach-init", ptrace(PTRACE_ATTACH, 1, 0, 0), ExpectDenied);
  TRY("ptrace-seize-init", ptrace(PTRACE_SEIZE, 1, 0, 0), ExpectDenied);
  char buf[16];
  struct iovec local = {buf, sizeof(buf)}, remote = {(void*)0x400000, sizeof(buf)};
  TRY("process_vm_readv-init", process_vm_readv(1, &local, 1, &remote, 1, 0), ExpectDenied);
  int pidfd = (int)syscall(SYS_pidfd_open, 1, 0);
  if (pidfd >= 0) {
    int escaped = 0;
    for (int fd = 0; fd < 64 && !escaped; ++fd) {
      long got = syscall(SYS_pidfd_getfd, pidfd, fd, 0);
      int err = errno;
      if (got >= 0 || err != EPERM) {
        ExpectDenied("pidfd_getfd-init", got, err);
        escaped = 1;
      }
    }
    if (!escaped) Blocked("pidfd_getfd-init", EPERM);
    close(pidfd);
  } else {
    Blocked("pidfd_getfd-init", errno);
  }
  OpenDenied("/proc/1/mem");
  OpenDenied("/proc/1/environ");
  OpenDenied("/proc/1/maps");
  DIR* d = opendir("/proc/1/fd");
  if (d) {
    Escaped("/proc/1/fd", "listed init's descriptors");
    closedir(d);
  } else {
    Blocked("/proc/1/fd", errno);
  }
  d = opendir("/proc/1/root/");
  if (d) {  // init's root is the sandbox's own root: seeing it is fine, but it must be ours
    closedir(d);
    Ok("/proc/1/root is the sandbox root");
  }
  // Init ignores signals from inside its namespace; if it died, the kernel would kill us too.
  kill(1, SIGKILL);
  kill(1, SIGTERM);
  usleep(100 * 1000);
  if (kill(1, 0) == 0 && getppid() == 1) {
    Blocked("kill-init", EPERM);
  } else {
    Escaped("kill-init", "init is gone");
  }
  return Finish();
}

static volatile long g_secret = 0x5eed1234;

static int Child(void) {
  pid_t pid = fork();
  if (pid == 0) {
    ptrace(PTRACE_TRACEME, 0, 0, 0);
    raise(SIGSTOP);
    _exit(7);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status)) {
    Broken("trace own child (stop)", errno);
    return Finish();
  }
  errno = 0;
  long word = ptrace(PTRACE_PEEKDATA, pid, (void*)&g_secret, 0);
  if (errno != 0 || word != g_secret) {
    Broken("trace own child (peek)", errno);
  } else {
    Ok("trace own child");
  }
  ptrace(PTRACE_CONT, pid, 0, 0);
  waitpid(pid, &status, 0);
  return Finish();
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "init") == 0) return Init();
  if (argc == 2 && strcmp(argv[1], "child") == 0) return Child();
  fprintf(stderr, "usage: ptrace_probe init|child\n");
  return 2;
}
