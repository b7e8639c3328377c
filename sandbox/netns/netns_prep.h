// The sandbox's network namespace, made ahead: by an earlier run (netns_pool.h) or on a thread
// of its own.
//
// Why: creating a network namespace is most of clone3's cost (measured here: clone3 into the six
// namespaces 0.6 ms, 0.13 ms without the network one). Made ahead, it is ready when clone3 runs;
// the supervisor's thread joins it just around clone3 (setns there and back, ~5 us), so the child
// is born in it.
//
// The namespace then belongs to the host's user namespace (moat makes it, as root), not to the
// sandbox's. That is stricter: the sandbox's root cannot configure it at all (no addresses,
// routes, links or lo down). It also means that the supervisor does the two steps that need
// privilege over the namespace: bringing `lo` up, and mounting the sysfs that shows it (the kernel
// lets only a process privileged over a network namespace mount a sysfs for it); the sysfs is
// handed to the child as a detached, read-only mount (MountPlan::UseDetachedSysfs).
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sandbox/netns/netns_pool.h"
#include "util/side_thread.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

struct PreparedNetwork {
  UniqueFd netns;  // the namespace (nsfs), for setns before clone3
  UniqueFd sysfs;  // a detached sysfs of that namespace: read-only, nosuid, nodev, noexec
};

// Makes a network namespace with `lo` up and, if `with_sysfs`, its sysfs (a pooled namespace gets
// its sysfs when taken), on the calling thread, and puts the thread back in its own namespace
// before returning (whatever happened).
absl::StatusOr<PreparedNetwork> PrepareNetwork(bool with_sysfs = true);

// PrepareNetwork's result for a namespace made earlier (a pooled one): checks that `lo` is up and
// mounts the namespace's sysfs, from the calling thread, which it puts back where it was.
absl::StatusOr<PreparedNetwork> AdoptNetwork(UniqueFd netns);

// The sandbox's network namespace, ready when clone3 needs it.
//
// With a pool (netns_pool.h), construction claims a namespace an earlier run made (~0.05 ms).
// A side thread, started at construction on another CPU, readies it (its sysfs), or makes this
// run's namespace if the pool had none; once AllowRefill() says the sandbox is in its cgroup, it
// makes one for the pool, so that the next run finds one ready. Then, on the same thread,
// `housekeeping` (work that should not hold up the sandbox, and need not start a thread of its
// own).
//
// On a busy machine a new thread can wait milliseconds for a CPU (or not be made at all, under a
// process limit). Waiting for it would then cost more than what it saves, so whoever comes first
// claims the work: if Take() finds the
// thread not begun, it readies the pooled namespace itself, or with none returns Unavailable at
// once (the caller lets clone3 make the namespace, as without a preparation); the thread, when
// it runs, then makes none for this run.
class NetworkPreparation {
 public:
  explicit NetworkPreparation(std::function<void()> housekeeping = nullptr,
                              NetnsPool* pool = nullptr)
      : NetworkPreparation(PrepareNetwork, std::move(housekeeping), pool) {}
  // With another preparation (tests; its argument: with_sysfs). `pool` must outlive this object.
  NetworkPreparation(std::function<absl::StatusOr<PreparedNetwork>(bool)> prepare,
                     std::function<void()> housekeeping, NetnsPool* pool = nullptr);
  ~NetworkPreparation();  // joins: waits for the pool's namespace and `housekeeping` too

  NetworkPreparation(const NetworkPreparation&) = delete;
  NetworkPreparation& operator=(const NetworkPreparation&) = delete;

  // Where Take()'s namespace came from.
  enum class Source { kNone, kPool, kThread };

  // The network: the pooled one, else the thread's, waiting for it if the thread is making it;
  // Unavailable if neither (the thread had not begun). Once only.
  absl::StatusOr<PreparedNetwork> Take();
  Source source() const { return source_; }

  // Lets the thread make the pool's namespace: call once the sandbox is in its cgroup (before
  // that, the kernel work would delay the cgroup move's grace period). Also done by the
  // destructor.
  void AllowRefill();

 private:
  void Work();

  const std::function<absl::StatusOr<PreparedNetwork>(bool)> prepare_;
  const std::function<void()> housekeeping_;
  NetnsPool* const pool_;
  // Claimed at construction, before the thread starts; then the thread's, or Take()'s if it
  // finds the thread not begun (went_ahead_).
  absl::StatusOr<UniqueFd> pooled_;
  bool taken_ = false;
  Source source_ = Source::kNone;
  absl::Mutex mu_;
  bool began_ ABSL_GUARDED_BY(mu_) = false;
  bool went_ahead_ ABSL_GUARDED_BY(mu_) = false;  // Take() found the thread not begun
  std::optional<absl::StatusOr<PreparedNetwork>> made_ ABSL_GUARDED_BY(mu_);  // for Take
  Source made_source_ ABSL_GUARDED_BY(mu_) = Source::kNone;
  bool refill_allowed_ ABSL_GUARDED_BY(mu_) = false;
  SideThread thread_;  // last: started once everything above exists
};

}  // namespace moat::sandbox
