// The sandbox's network namespace, made ahead on a thread of its own.
//
// Why: creating a network namespace is most of clone3's cost (measured here: clone3 into the six
// namespaces 0.6 ms, 0.13 ms without the network one). Made on another thread while the
// supervisor resolves the policy and plans the mounts, it is ready when clone3 runs; the
// supervisor's thread joins it just around clone3 (setns there and back, ~5 us), so the child is
// born in it.
//
// The namespace then belongs to the host's user namespace (moat makes it, as root), not to the
// sandbox's. That is stricter: the sandbox's root cannot configure it at all (no addresses,
// routes, links or lo down). It also means that the supervisor does the two steps that need
// privilege over the namespace: bringing `lo` up, and mounting the sysfs that shows it (the kernel
// lets only a process privileged over a network namespace mount a sysfs for it); the sysfs is
// handed to the child as a detached, read-only mount (MountPlan::UseDetachedSysfs).
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "sandbox/util/unique_fd.h"

namespace moat::sandbox {

struct PreparedNetwork {
  UniqueFd netns;  // the namespace (nsfs), for setns before clone3
  UniqueFd sysfs;  // a detached sysfs of that namespace: read-only, nosuid, nodev, noexec
};

// Makes a network namespace with `lo` up and its sysfs, on the calling thread, and puts the
// thread back in its own namespace before returning (whatever happened).
absl::StatusOr<PreparedNetwork> PrepareNetwork();

// PrepareNetwork on a thread of its own, started at construction; then, on the same thread,
// `then` (housekeeping that should not hold up the sandbox, and need not start a thread of its
// own).
//
// On a busy machine a new thread can wait milliseconds for a CPU. Waiting for it would then
// cost more than what it saves, so whoever comes first claims the work: if Take() finds the
// thread has not begun, it returns Unavailable at once and the thread, when it runs, only does
// `then` (the caller lets clone3 make the namespace, as without a preparation).
class NetworkPreparation {
 public:
  explicit NetworkPreparation(std::function<void()> then = nullptr)
      : NetworkPreparation(PrepareNetwork, std::move(then)) {}
  // With another preparation (tests).
  NetworkPreparation(std::function<absl::StatusOr<PreparedNetwork>()> prepare,
                     std::function<void()> then);
  ~NetworkPreparation();  // joins: waits for `then` too

  NetworkPreparation(const NetworkPreparation&) = delete;
  NetworkPreparation& operator=(const NetworkPreparation&) = delete;

  // The network, waiting for it if the thread is making it; Unavailable if the thread had not
  // begun (it then never will). Once only.
  absl::StatusOr<PreparedNetwork> Take();

 private:
  std::atomic<bool> claimed_{false};  // by the thread (it prepares) or by Take (nobody does)
  std::promise<absl::StatusOr<PreparedNetwork>> promise_;
  std::future<absl::StatusOr<PreparedNetwork>> future_ = promise_.get_future();
  std::thread thread_;
};

}  // namespace moat::sandbox
