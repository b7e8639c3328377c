// The controller's Prometheus metrics (prometheus-cpp core, served from the controller's own
// HTTP server at /metrics). docs/metrics.md says what each means. Labels take few values:
// route patterns, status codes, node states and architectures; never a sandbox id.
// Thread-safe: prometheus-cpp's metrics are.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "controller/scheduler/framework.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace moat::controller {

class ControllerMetrics {
 public:
  ControllerMetrics();

  // `route` is the route's pattern ("/sandboxes/{id}"), never the path itself.
  void ObserveRequest(absl::string_view route, int status, absl::Duration duration);
  void ObserveCreateToReady(bool warm, absl::Duration duration);
  void ObserveScheduling(absl::Duration duration, int attempts);
  void SetPending(int pending);
  void SetNodes(const std::map<std::pair<std::string, std::string>, int>& by_state_and_arch);
  void SetSandboxes(const std::map<std::string, int>& by_state);
  void AddProxiedBytes(uint64_t bytes);
  // Summed over the nodes that are not Lost, per resource (cpu in cores, memory in bytes,
  // pids): what the nodes report allocatable, and what the scheduler reserved on them.
  void SetCapacity(const scheduler::Resources& allocatable, const scheduler::Resources& allocated);
  // One store call: `op` is get, list or commit.
  void ObserveStore(absl::string_view op, absl::Duration duration);
  // moat_controller_leader: 1 while this replica leads (always, with an embedded store).
  void SetLeader(bool leader);

  std::string Serialize() const;
  // For metrics kept beside these (tenant_metrics.h), served in the same /metrics.
  prometheus::Registry& registry() { return *registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>& requests_;
  prometheus::Family<prometheus::Histogram>& create_to_ready_;
  prometheus::Histogram& scheduling_;
  prometheus::Histogram& scheduling_attempts_;
  prometheus::Gauge& pending_;
  prometheus::Family<prometheus::Gauge>& nodes_;
  prometheus::Family<prometheus::Gauge>& sandboxes_;
  prometheus::Counter& proxied_bytes_;
  prometheus::Family<prometheus::Gauge>& allocatable_;
  prometheus::Family<prometheus::Gauge>& allocated_;
  prometheus::Family<prometheus::Histogram>& store_;
  prometheus::Gauge& leader_;
};

}  // namespace moat::controller
