// What the node API does, without HTTP: create, get, list, delete and renew sandboxes, expire
// them, report health and metrics. It ties the registry (bookkeeping), the backend (the kernel
// work) and the metrics together; the HTTP layer only translates.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node-agent/backend/backend.h"
#include "node-agent/config/config.h"
#include "node-agent/event_log.h"
#include "node-agent/metrics.h"
#include "node-agent/pool/recycle_queue.h"
#include "node-agent/pool/registry.h"
#include "node-agent/pool/sandbox_store.h"
#include "node-agent/pool/warm_pool.h"
#include "util/clock.h"

namespace moat::agent {

struct CreateRequest {
  std::string profile;
  std::optional<std::string> policy;  // A policy document; replaces the profile's default.
  Limits limits;                      // Zero fields take the profile's value; others may only
                                      // tighten it.
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> metadata;
  std::optional<absl::Duration> ttl;  // Default: the config's api.default_ttl.
  // The words of the sandbox's main process; empty: none. Started by the node API (HttpApi,
  // through ExecdApi::StartEntrypoint) once the sandbox is made; the service does not read it.
  std::vector<std::string> entrypoint;
};

class SandboxService {
 public:
  // All pointers must outlive the service. The warm pool is made now, from the config's
  // profiles as they are now, but idle until StartPool.
  SandboxService(const AgentConfig* config, SandboxBackend* backend, Registry* registry,
                 AgentMetrics* metrics, const Clock* clock);

  // A request for the profile's defaults (no policy given; limits not given or equal to the
  // profile's) takes a warm sandbox from the pool when there is one; any other request, or an
  // empty pool, makes one cold. The record's start_path says which (docs/pool.md).
  // Errors: InvalidArgument (unknown profile, limits above the profile's, ttl out of range,
  // bad policy), and the backend's Create errors.
  absl::StatusOr<SandboxRecord> Create(const CreateRequest& request);
  absl::StatusOr<SandboxRecord> Get(absl::string_view id) const;
  std::vector<SandboxRecord> List() const;
  // Destroys the sandbox and forgets it. FailedPrecondition while it is being created or
  // deleted. If the backend cannot clean up, the record stays, in state failed.
  absl::StatusOr<CleanupReport> Delete(absl::string_view id);
  // Freezes (thaws) every process of the sandbox; while paused its API refuses commands and
  // files (409) and it keeps its TTL. FailedPrecondition unless ready or running.
  absl::StatusOr<SandboxRecord> Pause(absl::string_view id);
  absl::StatusOr<SandboxRecord> Resume(absl::string_view id);
  // New expiry: now + ttl, at most api.max_ttl from now.
  absl::StatusOr<absl::Time> Renew(absl::string_view id, absl::Time expires_at);
  // Queues every sandbox whose time is up for recycling (the rate-limited recycle queue);
  // returns how many. An explicit Delete is not queued: its caller waits for the report.
  int DeleteExpired();
  // Until the recycle queue is empty (tests, shutdown); false on timeout.
  bool WaitRecycled(absl::Duration timeout) const { return recycle_queue_.WaitEmpty(timeout); }
  // At start: what a crashed agent left behind, cleaned.
  absl::StatusOr<CleanupReport> CleanLeftovers();
  // Keeps each handed-out sandbox's record in `store` (sandbox_store.h), for Readopt. Before
  // anything is created; without it nothing outlives the agent.
  void SetStore(const SandboxStore* store) { store_ = store; }
  // At start, before CleanLeftovers: the sandboxes the backend re-adopted that have a record
  // and time left are served again (registry, tokens); the others are destroyed. Returns the
  // ones served, with their commands, for the execd layer (ExecdApi::Readopt).
  std::vector<AdoptedSandboxInfo> Readopt();
  // The warm pool: started after CleanLeftovers (so its sandboxes are not taken for leftovers),
  // stopped before the backend goes away; StopPool destroys the warm sandboxes it holds.
  void StartPool() { pool_.Start(); }
  void StopPool() { pool_.Shutdown(); }
  WarmPool& pool() { return pool_; }  // For tests (WaitIdle, Stats) and RefillHold.
  // What a sandbox's probe saw (probe_monitor.h), reported as an event, a log line and a
  // metric. A violation (kind "syscall", "mount", ...) leaves the sandbox running: the kernel
  // already refused the act. A compromised sandbox (its probe stopped answering) is killed and
  // recycled at once, whoever holds it.
  void ReportViolation(absl::string_view id, absl::string_view kind, absl::string_view detail);
  void ReportLimit(absl::string_view id, absl::string_view type, absl::string_view resource,
                   absl::string_view detail);  // type: "near_limit" or "killed"
  void ReportHeartbeatMissed(absl::string_view id);
  // Every egress request (a metric); a denial is also an "egress" violation event. No log line
  // per request: the audit log has them, and a sandbox could flood the agent's log.
  void ReportEgress(absl::string_view id, bool allowed, absl::string_view detail);
  void ReportCompromised(absl::string_view id, absl::string_view reason);
  // The sandbox's init ended by itself (killed from the host, or by its probe over a limit):
  // an event, and the sandbox goes to the recycle queue.
  void ReportExited(absl::string_view id, absl::string_view detail);
  const EventLog& events() const { return events_; }
  // Called after a sandbox is recycled (expired, deleted or compromised), e.g. to forget its
  // commands. Set before the server starts.
  void SetOnRecycled(std::function<void(const std::string&)> on_recycled) {
    on_recycled_ = std::move(on_recycled);
  }
  // Called with each violation of a sandbox in `moat run`'s words, for its commands' results
  // (ExecdApi::AddViolation): a probe's "syscall" as ("seccomp", "blocked system call NAME"), its
  // "mount" as it is, an egress denial as ("network", the request and why). The probe's memory
  // violations are not passed on: the command's OOM-kill count says them (ExecExit).
  void SetOnViolation(
      std::function<void(const std::string& id, const std::string& kind, const std::string& detail)>
          on_violation) {
    absl::MutexLock lock(&on_violation_mu_);
    on_violation_ = std::move(on_violation);
  }
  bool TokenMatches(absl::string_view id, absl::string_view token) const;
  absl::Status Health();
  std::string MetricsText();  // Refreshes the gauges, then serializes.

  const AgentConfig& config() const { return *config_; }
  absl::Time Now() const { return clock_->Now(); }

 private:
  absl::StatusOr<CleanupReport> Recycle(const std::string& id);
  // Serves `request` from the pool, registered as `record`: the result of Create, or nothing if
  // the request does not qualify or the pool is empty (then the caller makes one cold).
  std::optional<absl::StatusOr<SandboxRecord>> TakeWarm(const CreateRequest& request,
                                                        const ProfileConfig& profile,
                                                        const Limits& limits, SandboxRecord record);

  const AgentConfig* config_;
  SandboxBackend* backend_;
  Registry* registry_;
  AgentMetrics* metrics_;
  const Clock* clock_;
  EventLog events_;
  std::function<void(const std::string&)> on_recycled_;
  // Set while the probes already report (they start with the warm pool): under its own lock.
  absl::Mutex on_violation_mu_;
  std::function<void(const std::string&, const std::string&, const std::string&)> on_violation_
      ABSL_GUARDED_BY(on_violation_mu_);
  void PassOnViolation(absl::string_view id, std::string kind, std::string detail);
  const SandboxStore* store_ = nullptr;
  void Save(absl::string_view id);
  // Last: destroyed first, so their threads stop before the members their callbacks use. The
  // pool gives its surplus and dead sandboxes to the recycle queue, so it goes first.
  RecycleQueue recycle_queue_;
  WarmPool pool_;
};

}  // namespace moat::agent
