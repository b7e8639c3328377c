// Test helper: a forked child that runs a function only once the parent releases it, so the
// parent can first move it into a cgroup (as the spawner does with a sandbox's init).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <functional>

namespace moat::sandbox::testing {

class TestChild {
 public:
  // Forks; the child waits for Release(), then exits with body()'s result.
  explicit TestChild(const std::function<int()>& body) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      char c;
      if (::read(fds[0], &c, 1) != 1) ::_exit(120);  // parent gone: do nothing
      ::_exit(body());
    }
    ::close(fds[0]);
    release_fd_ = fds[1];
  }
  ~TestChild() {
    if (release_fd_ >= 0) ::close(release_fd_);
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  TestChild(const TestChild&) = delete;
  TestChild& operator=(const TestChild&) = delete;

  pid_t pid() const { return pid_; }
  void Release() {
    char c = 'g';
    if (::write(release_fd_, &c, 1) != 1) return;
    ::close(release_fd_);
    release_fd_ = -1;
  }
  // Waits for the child and returns its wait status.
  int Wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    waited_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int release_fd_ = -1;
  bool waited_ = false;
};

// Burns `ns` nanoseconds of CPU time in the calling process, counted from the call: what the
// process used before (its fork, waiting to be released) is not part of it, so a cgroup it
// was moved into meanwhile counts all of it (under emulation a fork alone costs ~15 ms).
inline void BurnCpu(uint64_t ns) {
  auto used = [] {
    struct timespec ts;
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec;
  };
  const uint64_t until = used() + ns;
  volatile uint64_t sink = 0;
  while (used() < until) {
    for (int i = 0; i < 100000; ++i) sink = sink + i;
  }
}

// Reaps every exited child, including orphans adopted while we are a child subreaper.
inline void ReapAll() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace moat::sandbox::testing
