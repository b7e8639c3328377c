// The agent's Prometheus metrics (prometheus-cpp core; served by the agent's own HTTP server).
// docs/metrics.md says what each one means. Labels take few values: states, profiles from the
// config, fixed violation kinds; never a sandbox id. Thread-safe: prometheus-cpp's metrics are.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node-agent/backend/backend.h"
#include "node-agent/pool/registry.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace moat::agent {

// Kinds of violation the probe reports; anything else is counted as "other".
inline constexpr absl::string_view kViolationKinds[] = {"syscall", "mount", "process", "memory",
                                                        "pids",    "cpu",   "egress",  "other"};

class AgentMetrics {
 public:
  // One series per profile for the per-profile metrics, made now so they read 0 before use.
  explicit AgentMetrics(const std::vector<std::string>& profiles);

  void SetSandboxes(const std::map<SandboxState, int>& counts);
  void SetPoolDepth(absl::string_view profile, int depth);  // Unknown profiles are ignored.
  void SetPoolTarget(absl::string_view profile, int target);
  // A create request the pool could have served (the profile's defaults) found it empty.
  void AddPoolMiss(absl::string_view profile);
  void SetRecycleBacklog(int backlog);
  void ObserveRecycle(absl::Duration duration);
  void AddViolation(absl::string_view kind);
  void AddCompromised();
  void AddHeartbeatMiss();
  void ObserveStart(StartPath path, absl::Duration duration);
  void ObserveCommand(absl::Duration duration);
  void AddEgressRequest();
  void AddEgressDenial();
  void SetNodeUsage(const NodeUsage& usage);

  // The text exposition format (version 0.0.4), for GET /metrics.
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& sandboxes_;
  prometheus::Family<prometheus::Gauge>& pool_depth_;
  prometheus::Family<prometheus::Gauge>& pool_target_;
  prometheus::Family<prometheus::Counter>& pool_misses_;
  prometheus::Gauge& recycle_backlog_;
  prometheus::Histogram& recycle_duration_;
  prometheus::Family<prometheus::Counter>& violations_;
  prometheus::Counter& compromised_;
  prometheus::Counter& heartbeat_misses_;
  prometheus::Family<prometheus::Histogram>& start_;
  prometheus::Histogram& command_duration_;
  prometheus::Counter& egress_requests_;
  prometheus::Counter& egress_denials_;
  prometheus::Gauge& cpu_capacity_;
  prometheus::Gauge& cpu_allocated_;
  prometheus::Gauge& memory_capacity_;
  prometheus::Gauge& memory_used_;
  prometheus::Gauge& pids_capacity_;
  prometheus::Gauge& pids_used_;
  // Series made up front, so Set/Add never create new ones (label values stay bounded).
  std::map<SandboxState, prometheus::Gauge*> sandboxes_by_state_;
  std::map<std::string, prometheus::Gauge*, std::less<>> depth_by_profile_;
  std::map<std::string, prometheus::Gauge*, std::less<>> target_by_profile_;
  std::map<std::string, prometheus::Counter*, std::less<>> misses_by_profile_;
  std::map<std::string, prometheus::Counter*, std::less<>> violations_by_kind_;
  prometheus::Histogram* start_warm_;
  prometheus::Histogram* start_cold_;
};

}  // namespace moat::agent
