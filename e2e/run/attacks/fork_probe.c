// Process and thread bombs that count how far they get:
//   fork_probe procs     fork until the kernel refuses; prints "blocked fork after N: <errno>"
//   fork_probe threads   the same with threads (they count against the pids limit too)
// Every child blocks forever; the sandbox's end must take them all down.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "report.h"

static void* Park(void* arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  int n = 0;
  char what[64];
  if (strcmp(argv[1], "procs") == 0) {
    for (;; ++n) {
      pid_t pid = fork();
      if (pid == 0) Park(NULL);
      if (pid < 0) break;
      if (n > 100000) break;
    }
    snprintf(what, sizeof(what), "fork after %d", n);
  } else if (strcmp(argv[1], "threads") == 0) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (;; ++n) {
      pthread_t t;
      int rc = pthread_create(&t, &attr, Park, NULL);
      if (rc != 0) {
        errno = rc;
        break;
      }
      if (n > 100000) break;
    }
    snprintf(what, sizeof(what), "thread after %d", n);
  } else {
    return 2;
  }
  Blocked(what, errno);
  fflush(stdout);
  _exit(0);  // not exit(): the parked threads must not be waited for
}
