#include "node-agent/pool/recycle_queue.h"

#include <utility>

namespace moat::agent {

RecycleQueue::RecycleQueue(double per_second, RecycleFn recycle)
    : limiter_(&clock_, per_second), recycle_(std::move(recycle)), worker_([this] { Loop(); }) {}

RecycleQueue::~RecycleQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.join();
}

void RecycleQueue::Enqueue(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (queued_.insert(id).second) queue_.push_back(id);
}

int RecycleQueue::backlog() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size()) + in_progress_;
}

bool RecycleQueue::WaitEmpty(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](const RecycleQueue* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                    return self->queue_.empty() && self->in_progress_ == 0;
                                  },
                                  this),
                              timeout);
}

void RecycleQueue::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RecycleQueue* self)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopping_ || !self->queue_.empty(); },
          this));
      if (stopping_) return;
    }
    // Pace: wait for a token, but wake at once to stop.
    for (absl::Duration wait = limiter_.TryAcquire(); wait > absl::ZeroDuration();
         wait = limiter_.TryAcquire()) {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
      if (stopping_) return;
    }
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      id = std::move(queue_.front());
      queue_.pop_front();
      queued_.erase(id);
      ++in_progress_;
    }
    recycle_(id);
    absl::MutexLock lock(&mu_);
    --in_progress_;
  }
}

}  // namespace moat::agent
