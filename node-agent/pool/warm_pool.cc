#include "node-agent/pool/warm_pool.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "node-agent/pool/registry.h"
#include "util/log.h"

namespace moat::agent {
namespace {

// Weight of the newest Create in the moving average of refill latency: a few slow Creates
// (a loaded node) raise the target within a handful of refills, one outlier does not double it.
constexpr double kLatencyWeight = 0.2;

}  // namespace

int PoolTarget(int64_t peak_per_minute, absl::Duration refill_latency, int floor, int ceiling) {
  if (ceiling <= 0) return 0;
  double per_second = static_cast<double>(peak_per_minute) / 60.0;
  double need = std::ceil(kPoolHeadroom * per_second * absl::ToDoubleSeconds(refill_latency));
  // Clamp as a double first: a huge rate must not overflow the int.
  need = std::clamp(need, static_cast<double>(floor), static_cast<double>(ceiling));
  return static_cast<int>(need);
}

WarmPool::WarmPool(SandboxBackend* backend, const Clock* clock, std::vector<ProfileConfig> profiles,
                   WarmPoolOptions options, RecycleFn recycle)
    : backend_(backend), clock_(clock), options_(std::move(options)), recycle_(std::move(recycle)) {
  absl::MutexLock lock(&mu_);
  for (ProfileConfig& profile : profiles) {
    if (profile.pool_ceiling <= 0) continue;
    std::string name = profile.name;
    pools_.try_emplace(std::move(name), std::move(profile), clock_);
  }
}

WarmPool::~WarmPool() { Shutdown(); }

void WarmPool::Start() {
  int workers = std::max(1, options_.refill_concurrency);
  {
    absl::MutexLock lock(&mu_);
    if (running_ || stopping_) return;
    running_ = true;
    worker_count_ = workers;
    ChangedLocked();
  }
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

void WarmPool::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    running_ = false;
  }
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  std::vector<std::string> held;
  {
    absl::MutexLock lock(&mu_);
    worker_count_ = 0;
    for (auto& [name, pool] : pools_) {
      held.insert(held.end(), pool.ready.begin(), pool.ready.end());
      pool.ready.clear();
    }
    ChangedLocked();
  }
  if (held.empty()) return;
  CleanupReport total;
  for (const std::string& id : held) {
    absl::StatusOr<CleanupReport> report = backend_->Destroy(id);
    if (!report.ok()) {
      LogError(absl::StrCat("warm pool: cannot destroy warm sandbox ", id,
                            " at shutdown (the next agent start cleans it as a leftover): ",
                            report.status().ToString()));
      continue;
    }
    total += *report;
  }
  LogInfo(absl::StrCat("warm pool stopped: destroyed ", held.size(), " warm sandboxes (",
                       total.ToString(), ")"));
}

std::optional<std::string> WarmPool::Take(absl::string_view profile) {
  bool counted = false;
  while (true) {
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      auto it = pools_.find(profile);
      if (it == pools_.end()) return std::nullopt;
      ProfilePool& pool = it->second;
      if (!counted) pool.rate.Record();
      counted = true;
      ChangedLocked();  // The rate, and maybe the depth, changed: the workers look again.
      if (!running_ || pool.ready.empty()) return std::nullopt;
      id = std::move(pool.ready.front());
      pool.ready.pop_front();
    }
    // A warm sandbox may have died while it waited (OOM killer, a crashed init): never hand out
    // one that cannot run a command.
    absl::StatusOr<SandboxHealth> health = backend_->Probe(id);
    if (health.ok() && health->alive) return id;
    LogWarning(absl::StrCat("warm pool: sandbox ", id, " of profile \"", profile,
                            "\" is dead; recycling it instead of handing it out (",
                            health.ok() ? "its init has exited" : health.status().ToString(), ")"));
    recycle_(id);
  }
}

bool WarmPool::Drop(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, pool] : pools_) {
    auto it = std::find(pool.ready.begin(), pool.ready.end(), id);
    if (it == pool.ready.end()) continue;
    pool.ready.erase(it);
    ChangedLocked();
    LogInfo(absl::StrCat("warm pool: dropped sandbox ", id, " of profile \"", name,
                         "\" (recycled by the agent); making another"));
    return true;
  }
  return false;
}

PoolStats WarmPool::Stats(absl::string_view profile) const {
  absl::MutexLock lock(&mu_);
  auto it = pools_.find(profile);
  if (it == pools_.end()) return PoolStats{};
  const ProfilePool& pool = it->second;
  PoolStats stats;
  stats.depth = static_cast<int>(pool.ready.size());
  stats.creating = pool.creating;
  stats.target = TargetLocked(pool);
  stats.peak_per_minute = pool.rate.PeakPerMinute();
  stats.refill_latency = pool.refill_latency;
  stats.last_error = pool.last_error;
  return stats;
}

std::vector<std::string> WarmPool::Profiles() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, pool] : pools_) names.push_back(name);
  return names;
}

void WarmPool::Hold(int delta) {
  absl::MutexLock lock(&mu_);
  holds_ += delta;
  if (holds_ == 0) ChangedLocked();
}

void WarmPool::Kick() {
  absl::MutexLock lock(&mu_);
  ChangedLocked();
}

bool WarmPool::WaitIdle(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](const WarmPool* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->worker_count_ == 0 ||
                   (self->sleeping_ == self->worker_count_ && self->slept_at_ == self->generation_);
          },
          this),
      timeout);
}

int WarmPool::TargetLocked(const ProfilePool& pool) const {
  absl::Duration latency = pool.refill_latency == absl::ZeroDuration()
                               ? options_.assumed_refill_latency
                               : pool.refill_latency;
  return PoolTarget(pool.rate.PeakPerMinute(), latency, pool.config.pool_floor,
                    pool.config.pool_ceiling);
}

std::optional<WarmPool::Job> WarmPool::PickJobLocked() {
  if (!running_) return std::nullopt;
  // Trims first: they give the node back what it no longer needs.
  for (auto& [name, pool] : pools_) {
    int held = static_cast<int>(pool.ready.size()) + pool.creating;
    if (held > TargetLocked(pool) && !pool.ready.empty()) {
      Job job{Job::kTrim, name, std::move(pool.ready.front())};
      pool.ready.pop_front();
      return job;
    }
  }
  // Then one Create for the profile furthest below its target (not backing off).
  absl::Time now = clock_->Now();
  ProfilePool* neediest = nullptr;
  const std::string* neediest_name = nullptr;
  int largest_deficit = 0;
  for (auto& [name, pool] : pools_) {
    if (now < pool.retry_at) continue;
    if (holds_ > 0 && !pool.ready.empty()) continue;  // After the entrypoints start.
    int deficit = TargetLocked(pool) - static_cast<int>(pool.ready.size()) - pool.creating;
    if (deficit > largest_deficit) {
      largest_deficit = deficit;
      neediest = &pool;
      neediest_name = &name;
    }
  }
  if (neediest == nullptr) return std::nullopt;
  ++neediest->creating;  // Counted now, so no other worker overshoots the target.
  return Job{Job::kCreate, *neediest_name, ""};
}

void WarmPool::WorkerLoop() {
  mu_.Lock();
  while (!stopping_) {
    std::optional<Job> job = PickJobLocked();
    if (!job.has_value()) {
      uint64_t seen = generation_;
      slept_at_ = seen;
      ++sleeping_;
      struct Wake {
        const WarmPool* self;
        uint64_t seen;
      } wake{this, seen};
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](Wake* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                 return w->self->stopping_ || w->self->generation_ != w->seen;
                               },
                               &wake),
                           options_.recheck);
      --sleeping_;
      continue;
    }
    mu_.Unlock();
    if (job->kind == Job::kCreate) {
      CreateOne(job->profile);
    } else {
      recycle_(job->id);
    }
    mu_.Lock();
    ChangedLocked();
  }
  mu_.Unlock();
}

void WarmPool::CreateOne(const std::string& profile) {
  ProfileConfig config;
  {
    absl::MutexLock lock(&mu_);
    config = pools_.find(profile)->second.config;
  }
  // The profile's policy as the agent read and checked it at start (LoadProfilePolicies), as a
  // cold create uses it; a profile built in code (tests) without it reads its file here.
  absl::StatusOr<CreatedSandbox> created = absl::UnknownError("not attempted");
  SandboxSpec spec;
  spec.profile = config.name;
  spec.root_dir = config.root_dir;
  spec.limits = config.limits;
  absl::StatusOr<std::string> id = NewSandboxId();
  absl::StatusOr<std::string> policy = ReadProfilePolicy(config);
  if (!id.ok()) {
    created = id.status();
  } else if (!policy.ok()) {
    created = policy.status();
  } else {
    spec.id = *id;
    spec.policy = *policy;
    created = backend_->Create(spec);
  }

  absl::MutexLock lock(&mu_);
  ProfilePool& pool = pools_.find(profile)->second;
  --pool.creating;
  if (created.ok()) {
    pool.ready.push_back(spec.id);
    pool.refill_latency =
        pool.refill_latency == absl::ZeroDuration()
            ? created->start_duration
            : pool.refill_latency * (1 - kLatencyWeight) + created->start_duration * kLatencyWeight;
    if (pool.backoff > absl::ZeroDuration()) {
      LogInfo(absl::StrCat("warm pool: profile \"", profile, "\" makes sandboxes again"));
    }
    pool.backoff = absl::ZeroDuration();
    pool.retry_at = absl::InfinitePast();
    pool.last_error.clear();
    return;
  }
  pool.backoff = pool.backoff == absl::ZeroDuration()
                     ? options_.initial_backoff
                     : std::min(pool.backoff * 2, options_.max_backoff);
  pool.retry_at = clock_->Now() + pool.backoff;
  pool.last_error = created.status().ToString();
  LogWarning(absl::StrCat("warm pool: cannot make a sandbox for profile \"", profile, "\": ",
                          pool.last_error, "; retrying in ", absl::FormatDuration(pool.backoff)));
}

}  // namespace moat::agent
