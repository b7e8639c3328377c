// Descriptors inherited from outside: a directory descriptor of the host is a way out of the
// mount namespace (openat(fd, "..")), a file descriptor a way to its data. Only 0, 1 and 2 may be
// open when the command starts.
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

#include "report.h"

int main(void) {
  int found = 0;
  for (int fd = 3; fd < 65536; ++fd) {
    if (fcntl(fd, F_GETFD) < 0) continue;
    char link[64], target[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    target[n > 0 ? n : 0] = '\0';
    char what[32];
    snprintf(what, sizeof(what), "inherited fd %d", fd);
    Escaped(what, "open at start, points to \"%s\"", target);
    int up = openat(fd, "..", O_RDONLY | O_DIRECTORY);
    if (up >= 0) Escaped(what, "openat(fd, \"..\") works");
    found = 1;
  }
  if (!found) Ok("only stdin, stdout and stderr are open");
  return Finish();
}
