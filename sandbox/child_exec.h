// The last steps before a sandboxed command's execve, shared by `moat run`'s init (contain.cc)
// and a long-lived sandbox's reaper (reaper.cc). Both run in raw clones of a possibly
// multi-threaded supervisor: everything here is allocation-free and async-signal-safe.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace moat::sandbox {

// Default dispositions and an empty signal mask: what the supervisor or init set up (blocked
// SIGCHLD, handlers) must not leak into the command.
inline void ResetSignals() {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// execve, searching `search_path` (a PATH value: directories separated by ':') when `file` has
// no '/'. Returns only on failure, with errno set as execvp would: the first error other than
// ENOENT/ENOTDIR, else ENOENT.
inline void ExecSearchingPath(const char* file, char* const argv[], char* const envp[],
                              const char* search_path) {
  if (std::strchr(file, '/') != nullptr) {
    ::execve(file, argv, envp);
    return;
  }
  int first_error = ENOENT;
  char path[4096];
  const size_t flen = std::strlen(file);
  for (const char* dir = search_path; dir != nullptr && *dir != '\0';) {
    const char* end = std::strchr(dir, ':');
    const size_t dlen = end != nullptr ? static_cast<size_t>(end - dir) : std::strlen(dir);
    if (dlen > 0 && dlen + 1 + flen + 1 <= sizeof(path)) {
      std::memcpy(path, dir, dlen);
      path[dlen] = '/';
      std::memcpy(path + dlen + 1, file, flen + 1);
      ::execve(path, argv, envp);
      if (errno != ENOENT && errno != ENOTDIR && first_error == ENOENT) first_error = errno;
    }
    dir = end != nullptr ? end + 1 : nullptr;
  }
  errno = first_error;
}

}  // namespace moat::sandbox
