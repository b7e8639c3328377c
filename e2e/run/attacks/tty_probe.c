// Terminal injection: pushing bytes into a terminal's input queue (TIOCSTI) types commands into
// the shell that started the sandbox once it exits. Every route must fail:
//   the command's stdin/stdout/stderr, /dev/tty (the controlling terminal), host terminals under
//   /dev/pts or /dev/console, a terminal of its own, and TIOCSTI with junk in the upper 32 bits.
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "report.h"

static void TrySti(const char* what, int fd) {
  char c = '#';
  TRY(what, ioctl(fd, TIOCSTI, &c), Expect);
}

int main(void) {
  TrySti("TIOCSTI fd0", 0);
  TrySti("TIOCSTI fd1", 1);
  TrySti("TIOCSTI fd2", 2);
  char c = '#';
  TRY("TIOCSTI high bits fd0", syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI | (1UL << 32), &c),
      Expect);
  char sel[2] = {2 /* TIOCL_SETSEL: select text on the console */, 0};
  TRY("TIOCLINUX fd0", ioctl(0, TIOCLINUX, sel), Expect);

  TRY("open /dev/tty", open("/dev/tty", O_RDWR | O_NOCTTY), Expect);
  TRY("open /dev/console", open("/dev/console", O_RDWR | O_NOCTTY), Expect);
  TRY("open /dev/tty0", open("/dev/tty0", O_RDWR | O_NOCTTY), Expect);
  for (int fd = 0; fd < 3; ++fd) {
    char what[32];
    snprintf(what, sizeof(what), "controlling tty fd%d", fd);
    TRY(what, tcgetpgrp(fd), Expect);
  }

  // A terminal of our own is fine to have, but injecting into it is still refused.
  int master = open("/dev/ptmx", O_RDWR | O_NOCTTY);
  int own = -1;
  if (master >= 0 && ioctl(master, TIOCGPTN, &own) == 0) {
    TrySti("TIOCSTI own pty", master);
  }
  DIR* pts = opendir("/dev/pts");
  if (pts) {
    struct dirent* e;
    while ((e = readdir(pts)) != NULL) {
      if (e->d_name[0] == '.' || strcmp(e->d_name, "ptmx") == 0) continue;
      if (own >= 0 && atoi(e->d_name) == own) continue;
      Escaped("/dev/pts", "a terminal that is not ours is visible: /dev/pts/%s", e->d_name);
    }
    closedir(pts);
    Ok("no foreign terminal in /dev/pts");
  }
  return Finish();
}
