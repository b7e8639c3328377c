// System calls through another ABI, which a filter written for x86-64 numbers would misread:
//   compat_syscall int80   getpid via `int $0x80` (the i386 table: 20 is getpid there, but 20 is
//                          writev on x86-64; a filter that only checks numbers is confused)
//   compat_syscall x32     getpid via the x32 table (nr | 0x40000000)
// The sandbox must kill the process (SIGSYS); surviving the call prints ESCAPED.
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

#include "report.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
#if defined(__x86_64__)
  if (strcmp(argv[1], "int80") == 0) {
    long rc;
    // i386 unshare is 310: a forbidden call that the 64-bit table does not know by that number.
    __asm__ volatile("int $0x80" : "=a"(rc) : "a"(310L), "b"(0x10000000L) : "memory");
    Escaped("int80", "the process survived a 32-bit system call (returned %ld)", rc);
    return Finish();
  }
  if (strcmp(argv[1], "x32") == 0) {
    long rc = syscall(0x40000000L | 39 /* getpid */);
    Escaped("x32", "the process survived an x32 system call (returned %ld)", rc);
    return Finish();
  }
#endif
  fprintf(stderr, "compat_syscall: unknown or unsupported mode \"%s\"\n", argv[1]);
  return 2;
}
