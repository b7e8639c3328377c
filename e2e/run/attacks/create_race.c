// Races the creation guard (sandbox/creation_guard.h): one thread creates a file through a path
// buffer that another thread keeps flipping between a harmless name and a protected one. A guard
// that checked the path and then let the kernel read it again (seccomp's "continue") would sooner
// or later create the protected file.
//   create_race NAME ROUNDS   prints "ESCAPED race ..." or "held race: C created, R refused"
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[256] = "harmless-name";
static char protected_name[256];
static atomic_int stop;

static void* Flip(void* arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    strcpy(path, protected_name);
    strcpy(path, "harmless-name");
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3 || strlen(argv[1]) >= sizeof(protected_name)) {
    fprintf(stderr, "usage: create_race NAME ROUNDS\n");
    return 2;
  }
  strcpy(protected_name, argv[1]);
  int rounds = atoi(argv[2]);
  pthread_t flipper;
  if (pthread_create(&flipper, NULL, Flip, NULL) != 0) return 2;
  int created = 0, refused = 0;
  for (int i = 0; i < rounds; ++i) {
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) {
      close(fd);
      unlink("harmless-name");
      ++created;
    } else {
      ++refused;
    }
    if (access(protected_name, F_OK) == 0) {
      printf("ESCAPED race: %s exists after %d rounds\n", protected_name, i + 1);
      atomic_store(&stop, 1);
      pthread_join(flipper, NULL);
      return 0;
    }
  }
  atomic_store(&stop, 1);
  pthread_join(flipper, NULL);
  printf("held race: %d created, %d refused\n", created, refused);
  return 0;
}
