// The recycle queue: sandboxes that expired or were declared compromised wait here and are
// recycled one at a time, at most `per_second` a second (the config's recycle.per_second), so a
// mass expiry cannot take the node's CPU and I/O from the sandboxes still running. Its backlog
// is the moat_recycle_backlog metric.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "util/clock.h"
#include "util/token_bucket.h"

namespace moat::agent {

class RecycleQueue {
 public:
  using RecycleFn = std::function<void(const std::string& id)>;

  // `recycle` runs on the queue's own thread, one id at a time.
  RecycleQueue(double per_second, RecycleFn recycle);
  ~RecycleQueue();  // Stops after the recycle in progress; ids still queued are left (the
                    // next agent start cleans them as leftovers).

  // Queues `id` unless it is already queued.
  void Enqueue(const std::string& id);
  int backlog() const;  // Queued, plus the one being recycled.
  // Blocks until the backlog is 0 or `timeout` passes; true if it is 0.
  bool WaitEmpty(absl::Duration timeout) const;

 private:
  void Loop();

  RealClock clock_;
  TokenBucket limiter_;  // Used by the worker thread only.
  RecycleFn recycle_;
  mutable absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  int in_progress_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace moat::agent
