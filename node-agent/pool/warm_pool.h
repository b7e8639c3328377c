// The warm pool: per profile, sandboxes made ahead with the profile's root, default policy and
// limits, so that a create request takes one (the fast path) instead of waiting for a backend
// Create. docs/pool.md explains the sizing; in short, per profile:
//
//   target = clamp(ceil(kHeadroom x peak_minute_rate x refill_latency), floor, ceiling)
//
// where peak_minute_rate is the busiest minute of the last hour (RequestRate, per second) and
// refill_latency is how long the backend takes to make one (a moving average of what Create
// reports; 1 s until measured). Worker threads (the config's pool.refill_concurrency, 1 by default)
// make sandboxes one at a time each while a profile holds fewer than its target, and hand the
// surplus to `recycle` when it holds more. A failed Create backs the profile off (1 s, doubling, at
// most a minute) with a log line saying why; the other profiles go on.
//
// A sandbox leaves the pool exactly once: taken (then it belongs to the caller; the pool never
// sees it again, so a used sandbox is never reused), trimmed or found dead (to `recycle`),
// dropped (Drop: the agent recycled it itself, e.g. compromised), or destroyed at Shutdown.
//
// Life of the pool:
//
//   constructed ──Start──▶ running ──Shutdown──▶ stopped (holds nothing; Take returns nothing)
//        └──────────────Shutdown─────────────────▲
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node-agent/backend/backend.h"
#include "node-agent/config/config.h"
#include "util/clock.h"
#include "util/request_rate.h"

namespace moat::agent {

// The pool aims to hold twice what the peak rate needs during one refill: bursts within a
// minute are uneven, and the refill of several sandboxes is sequential.
inline constexpr double kPoolHeadroom = 2.0;

// The sizing rule above, as a pure function. peak_per_minute: requests in the busiest minute of
// the last hour; refill_latency: the time one backend Create takes.
int PoolTarget(int64_t peak_per_minute, absl::Duration refill_latency, int floor, int ceiling);

struct WarmPoolOptions {
  int refill_concurrency = 1;  // Worker threads; each makes one sandbox at a time.
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Minutes(1);
  // The refill latency assumed until the profile's first Create is measured: without it a
  // profile with a floor of 0 would never make one, so never learn its latency, never grow.
  absl::Duration assumed_refill_latency = absl::Seconds(1);
  // Without being woken (by Take, a finished Create, Kick), workers look again this often, in
  // real time, so a target that falls as the hour slides is noticed.
  absl::Duration recheck = absl::Seconds(1);
};

struct PoolStats {
  int depth = 0;     // Ready to hand out.
  int creating = 0;  // Backend Creates in flight.
  int target = 0;
  int64_t peak_per_minute = 0;
  absl::Duration refill_latency;  // Zero until the first Create of the profile.
  std::string last_error;         // Of the last failed Create; empty once one succeeds.
};

class WarmPool {
 public:
  // Called with a sandbox the pool gives up (surplus, or dead when it was about to be handed
  // out). Must not block for long: the agent passes its rate-limited recycle queue's Enqueue.
  using RecycleFn = std::function<void(const std::string& id)>;

  // `backend` and `clock` must outlive the pool. Profiles with a ceiling of 0 have no pool.
  WarmPool(SandboxBackend* backend, const Clock* clock, std::vector<ProfileConfig> profiles,
           WarmPoolOptions options, RecycleFn recycle);
  ~WarmPool();  // Shutdown().

  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // Starts the workers, which fill every profile to its floor first. Once only; not after
  // Shutdown.
  void Start();
  // Stops the workers (a Create in flight finishes first), then destroys every sandbox the pool
  // holds, directly through the backend (the recycle queue may be stopping too). Idempotent.
  void Shutdown();

  // A create request for `profile`'s defaults: counts it in the profile's request rate and
  // returns a ready sandbox, checked alive just now (backend Probe), or nothing (pool empty,
  // not running, unknown profile): then the caller makes one cold. Dead ones met on the way go
  // to `recycle`. Wakes the workers to refill.
  std::optional<std::string> Take(absl::string_view profile);

  // While one is held, the workers start no refill for a profile that still has a ready
  // sandbox: a create that took one is still starting its entrypoint (two process starts in
  // it), and a refill beside it (a whole sandbox cloned) takes the node's CPU from them. An
  // empty profile is refilled regardless. Taken before Take; its end wakes the workers.
  class [[nodiscard]] RefillHold {
   public:
    explicit RefillHold(WarmPool* pool) : pool_(pool) { pool_->Hold(+1); }
    ~RefillHold() { pool_->Hold(-1); }
    RefillHold(const RefillHold&) = delete;
    RefillHold& operator=(const RefillHold&) = delete;

   private:
    WarmPool* pool_;
  };

  // Forgets `id` if the pool holds it (the agent is recycling it: compromised, or its init
  // ended) and wakes the workers, which replace it at once; true if it was held. The pool does
  // not recycle it: the caller does.
  bool Drop(absl::string_view id);

  // Unknown profile: all zero.
  PoolStats Stats(absl::string_view profile) const;
  std::vector<std::string> Profiles() const;

  // Wakes the workers to look at the targets now (tests step a FakeClock, then Kick).
  void Kick();
  // Blocks until no worker has anything to do (all asleep since the last change), or `timeout`
  // passes; true if idle. For tests and shutdown.
  bool WaitIdle(absl::Duration timeout) const;

 private:
  struct ProfilePool {
    ProfilePool(ProfileConfig config, const Clock* clock)
        : config(std::move(config)), rate(clock) {}
    ProfileConfig config;
    std::deque<std::string> ready;  // Oldest first.
    int creating = 0;
    RequestRate rate;
    absl::Duration refill_latency;
    absl::Duration backoff;  // Zero unless the last Create failed.
    absl::Time retry_at = absl::InfinitePast();
    std::string last_error;
  };
  // One unit of worker work, chosen under the lock and done outside it.
  struct Job {
    enum Kind { kCreate, kTrim } kind;
    std::string profile;
    std::string id;  // kTrim: the sandbox to give up.
  };

  void Hold(int delta) ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerLoop();
  std::optional<Job> PickJobLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int TargetLocked(const ProfilePool& pool) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CreateOne(const std::string& profile);
  void ChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++generation_; }

  SandboxBackend* const backend_;
  const Clock* const clock_;
  const WarmPoolOptions options_;
  const RecycleFn recycle_;

  // mu_ guards the per-profile state and the worker bookkeeping. Backend calls and recycle_ are
  // made without it: a Create may take seconds.
  mutable absl::Mutex mu_;
  std::map<std::string, ProfilePool, std::less<>> pools_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int holds_ ABSL_GUARDED_BY(mu_) = 0;  // RefillHolds out.
  // Bumped on every change a worker could act on; a worker sleeps only at a generation where
  // it found nothing to do, so no wake-up is lost.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int worker_count_ ABSL_GUARDED_BY(mu_) = 0;
  int sleeping_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t slept_at_ ABSL_GUARDED_BY(mu_) = 0;  // Generation the last sleeper found idle.
  std::vector<std::thread> workers_;            // Start and Shutdown only, which run on one thread.
};

}  // namespace moat::agent
