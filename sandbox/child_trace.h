// When the sandbox's own setup steps end, for MOAT_TRACE: the child (and the command, until its
// execve) stamp them into memory shared with the supervisor, which adds them to its timeline.
// Only with tracing on; the stamps are vDSO clock reads, no system calls.
#pragma once

#include <sys/mman.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace moat::sandbox {

class ChildTrace {
 public:
  enum Step {
    kIdsMapped,      // child: the supervisor's 'M' arrived
    kMountsDone,     // child: file system view built, pivoted
    kCgroupEntered,  // child: the supervisor's 'C' arrived, cgroup namespace made
    kPrivilegesDropped,
    kCommandCloned,  // command: running as pid 2
    kSeccompOn,      // command: filter installed, about to execve
    kCommandExited,  // init: reaped the command, about to report and exit
    kCount,
  };

  // Shared anonymous memory, inherited by the clones; nullptr if it cannot be mapped (tracing
  // then shows only the supervisor's steps).
  static ChildTrace* Create() {
    void* p = ::mmap(nullptr, sizeof(ChildTrace), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : new (p) ChildTrace();
  }
  static void Destroy(ChildTrace* trace) {
    if (trace != nullptr) ::munmap(trace, sizeof(ChildTrace));
  }

  // Child side: async-signal-safe.
  void Stamp(Step step) {
    struct timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    ns_[step].store(ts.tv_sec * 1'000'000'000LL + ts.tv_nsec, std::memory_order_relaxed);
  }

  // Supervisor side: the steps stamped so far, on absl's clock.
  std::vector<std::pair<const char*, absl::Time>> Timeline() const {
    struct timespec now_mono;
    ::clock_gettime(CLOCK_MONOTONIC, &now_mono);
    const absl::Time now = absl::Now();
    const int64_t now_ns = now_mono.tv_sec * 1'000'000'000LL + now_mono.tv_nsec;
    std::vector<std::pair<const char*, absl::Time>> steps;
    for (int i = 0; i < kCount; ++i) {
      const int64_t at = ns_[i].load(std::memory_order_relaxed);
      if (at != 0) steps.emplace_back(Name(Step(i)), now - absl::Nanoseconds(now_ns - at));
    }
    return steps;
  }

 private:
  ChildTrace() = default;

  static const char* Name(Step step) {
    switch (step) {
      case kIdsMapped:
        return "child: id maps received";
      case kMountsDone:
        return "child: mounts done, pivoted";
      case kCgroupEntered:
        return "child: in its cgroup";
      case kPrivilegesDropped:
        return "child: privileges dropped";
      case kCommandCloned:
        return "command: cloned (pid 2)";
      case kSeccompOn:
        return "command: seccomp on, execve";
      case kCommandExited:
        return "init: command exited";
      case kCount:
        break;
    }
    return "?";
  }
  std::atomic<int64_t> ns_[kCount] = {};
};

}  // namespace moat::sandbox
