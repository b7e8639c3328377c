// Allocates and touches memory 1 MiB at a time without end. The memory limit must stop it: the
// kernel's OOM killer inside the sandbox's cgroup, or a failed allocation.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"

int main(void) {
  for (long mib = 0;; ++mib) {
    char* p = malloc(1 << 20);
    if (p == NULL) {
      char what[64];
      snprintf(what, sizeof(what), "malloc after %ld MiB", mib);
      Blocked(what, ENOMEM);
      return Finish();
    }
    memset(p, 0x5a, 1 << 20);
    if (mib == 1 << 16) {  // 64 GiB: no limit at all
      Escaped("memory", "allocated %ld MiB", mib);
      return Finish();
    }
  }
}
