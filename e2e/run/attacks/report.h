// Shared by the attack programs: one line per attempt, so tests can check that every attempt was
// made and how it failed.
//   "blocked <what>: <ERRNO_NAME>"   the attempt failed with that errno
//   "ESCAPED <what>: <detail>"       the attempt worked; the program then exits 1
//   "ok <what>"                      a control that must work (e.g. tracing one's own child)
// Exit status: 0 when nothing escaped, 1 when something did, 2 on misuse or a failed control.
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_escaped = 0;
static int g_broken = 0;

// One errno name per case; clang-format would re-indent this run of macro calls on every pass.
// clang-format off
static const char* ErrnoName(int e) {
  switch (e) {
#define N(x) case x: return #x;
    N(EPERM) N(ENOENT) N(ESRCH) N(EINTR) N(EIO) N(ENXIO) N(E2BIG) N(ENOEXEC) N(EBADF)
    N(ECHILD) N(EAGAIN) N(ENOMEM) N(EACCES) N(EFAULT) N(EBUSY) N(EEXIST) N(EXDEV) N(ENODEV)
    N(ENOTDIR) N(EISDIR) N(EINVAL) N(ENFILE) N(EMFILE) N(ENOTTY) N(ETXTBSY) N(EFBIG) N(ENOSPC)
    N(ESPIPE) N(EROFS) N(EMLINK) N(EPIPE) N(ERANGE) N(ENOSYS) N(ENOTEMPTY) N(ELOOP)
    N(ENOTSOCK) N(EPROTONOSUPPORT) N(EOPNOTSUPP) N(EAFNOSUPPORT) N(EADDRINUSE)
    N(EADDRNOTAVAIL) N(ENETDOWN) N(ENETUNREACH) N(ECONNRESET) N(ETIMEDOUT) N(ECONNREFUSED)
    N(EHOSTUNREACH) N(EINPROGRESS) N(ENOKEY) N(EDQUOT) N(ESTALE) N(ENOTCONN) N(EPROTOTYPE)
#undef N
    default: return "E?";
  }
}
// clang-format on

static void Blocked(const char* what, int err) { printf("blocked %s: %s\n", what, ErrnoName(err)); }

static void Escaped(const char* what, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("ESCAPED %s: ", what);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  g_escaped = 1;
}

static void Ok(const char* what) { printf("ok %s\n", what); }

static void Broken(const char* what, int err) {
  printf("BROKEN %s: %s\n", what, ErrnoName(err));
  g_broken = 1;
}

// Records the outcome of a call that returns -1 with errno on failure.
static void Expect(const char* what, long rc, int err) {
  if (rc < 0) {
    Blocked(what, err);
  } else {
    Escaped(what, "returned %ld", rc);
  }
}

// Makes `call` (an expression returning -1 with errno on failure) and records the outcome. A macro
// so that errno is read after the call: function arguments are evaluated in no fixed order.
#define TRY(what, call, check)        \
  do {                                \
    errno = 0;                        \
    long try_rc_ = (long)(call);      \
    int try_errno_ = errno;           \
    check(what, try_rc_, try_errno_); \
  } while (0)

static int Finish(void) {
  fflush(stdout);
  return g_escaped ? 1 : (g_broken ? 2 : 0);
}
