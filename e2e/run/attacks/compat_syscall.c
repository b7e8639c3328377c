// System calls through another ABI, which a filter written for x86-64 numbers would misread:
//   compat_syscall int80   getpid via `int $0x80` (the i386 table: 20 is getpid there, but 20 is
//                          writev on x86-64; a filter that only checks numbers is confused)
//   compat_syscall x32     getpid via the x32 table (nr | 0x40000000)
//   compat_syscall arm32   (built for 32-bit ARM, run on aarch64) unshare via the AArch32 table
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
#elif defined(__arm__)
  // Built as a 32-bit ARM program (arm-linux-gnueabihf-gcc) and run on an aarch64 kernel: every
  // call it makes goes through the AArch32 table (AUDIT_ARCH_ARM), which the aarch64 filter
  // must refuse outright. Outside a sandbox it runs to the end, which shows the kernel runs it.
  if (strcmp(argv[1], "arm32") == 0) {
    long rc = syscall(337 /* unshare in the ARM EABI table */, 0x10000000L /* CLONE_NEWUSER */);
    Escaped("arm32", "the process survived a 32-bit ARM system call (returned %ld)", rc);
    return Finish();
  }
#endif
  fprintf(stderr, "compat_syscall: unknown or unsupported mode \"%s\"\n", argv[1]);
  return 2;
}
