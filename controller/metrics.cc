#include "controller/metrics.h"

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace moat::controller {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005,
                                                       0.01,   0.025,   0.05,   0.1,   0.25,  0.5,
                                                       1,      2.5,     5,      10,    30,    60};
  return kBuckets;
}

}  // namespace

ControllerMetrics::ControllerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(BuildHistogram()
                    .Name("moat_controller_request_duration_seconds")
                    .Help("API requests by route pattern and HTTP status code.")
                    .Register(*registry_)),
      create_to_ready_(BuildHistogram()
                           .Name("moat_controller_create_to_ready_seconds")
                           .Help("From a create request to a ready sandbox, warm or cold start.")
                           .Register(*registry_)),
      scheduling_(BuildHistogram()
                      .Name("moat_controller_scheduling_duration_seconds")
                      .Help("Placing one sandbox: decisions and reservations until a node took it.")
                      .Register(*registry_)
                      .Add({}, LatencyBuckets())),
      scheduling_attempts_(BuildHistogram()
                               .Name("moat_controller_scheduling_attempts")
                               .Help("Nodes tried to place one sandbox.")
                               .Register(*registry_)
                               .Add({}, Histogram::BucketBoundaries{1, 2, 3, 4})),
      pending_(BuildGauge()
                   .Name("moat_controller_pending_sandboxes")
                   .Help("Create requests waiting for a node.")
                   .Register(*registry_)
                   .Add({})),
      nodes_(BuildGauge()
                 .Name("moat_controller_nodes")
                 .Help("Nodes by state and architecture.")
                 .Register(*registry_)),
      sandboxes_(BuildGauge()
                     .Name("moat_controller_sandboxes")
                     .Help("Sandboxes the controller knows, by state.")
                     .Register(*registry_)),
      proxied_bytes_(BuildCounter()
                         .Name("moat_controller_proxied_bytes_total")
                         .Help("Response bytes proxied from agents to clients.")
                         .Register(*registry_)
                         .Add({})),
      allocatable_(BuildGauge()
                       .Name("moat_controller_allocatable")
                       .Help("What the nodes that are not Lost report allocatable, per resource "
                             "(cpu cores, memory bytes, pids).")
                       .Register(*registry_)),
      allocated_(BuildGauge()
                     .Name("moat_controller_allocated")
                     .Help("What the scheduler reserved on those nodes, per resource (with "
                           "overcommit it may exceed allocatable).")
                     .Register(*registry_)),
      store_(BuildHistogram()
                 .Name("moat_controller_store_request_duration_seconds")
                 .Help("Calls to the durable store by op (get, list, commit).")
                 .Register(*registry_)),
      leader_(BuildGauge()
                  .Name("moat_controller_leader")
                  .Help("1 while this replica leads (runs placement, node leases, expiry).")
                  .Register(*registry_)
                  .Add({})) {}

void ControllerMetrics::ObserveRequest(absl::string_view route, int status,
                                       absl::Duration duration) {
  requests_.Add({{"route", std::string(route)}, {"code", absl::StrCat(status)}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(duration));
}

void ControllerMetrics::ObserveCreateToReady(bool warm, absl::Duration duration) {
  create_to_ready_.Add({{"start", warm ? "warm" : "cold"}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(duration));
}

void ControllerMetrics::ObserveScheduling(absl::Duration duration, int attempts) {
  scheduling_.Observe(absl::ToDoubleSeconds(duration));
  scheduling_attempts_.Observe(attempts);
}

void ControllerMetrics::SetPending(int pending) { pending_.Set(pending); }

void ControllerMetrics::SetLeader(bool leader) { leader_.Set(leader ? 1 : 0); }

void ControllerMetrics::SetNodes(
    const std::map<std::pair<std::string, std::string>, int>& by_state_and_arch) {
  // Every state for every architecture seen, so a state that empties reads 0, not stale.
  std::map<std::string, bool> arches;
  for (const auto& [key, n] : by_state_and_arch) arches[key.second] = true;
  for (const auto& [arch, unused] : arches) {
    for (const char* state : {"Ready", "NotReady", "Lost"}) {
      auto it = by_state_and_arch.find({state, arch});
      nodes_.Add({{"state", state}, {"arch", arch}})
          .Set(it == by_state_and_arch.end() ? 0 : it->second);
    }
  }
}

void ControllerMetrics::SetSandboxes(const std::map<std::string, int>& by_state) {
  for (const char* state :
       {"Pending", "Running", "Pausing", "Paused", "Resuming", "Failed", "Terminated"}) {
    auto it = by_state.find(state);
    sandboxes_.Add({{"state", state}}).Set(it == by_state.end() ? 0 : it->second);
  }
}

void ControllerMetrics::AddProxiedBytes(uint64_t bytes) {
  proxied_bytes_.Increment(static_cast<double>(bytes));
}

void ControllerMetrics::SetCapacity(const scheduler::Resources& allocatable,
                                    const scheduler::Resources& allocated) {
  allocatable_.Add({{"resource", "cpu"}}).Set(allocatable.cpu);
  allocatable_.Add({{"resource", "memory"}}).Set(static_cast<double>(allocatable.memory));
  allocatable_.Add({{"resource", "pids"}}).Set(static_cast<double>(allocatable.pids));
  allocated_.Add({{"resource", "cpu"}}).Set(allocated.cpu);
  allocated_.Add({{"resource", "memory"}}).Set(static_cast<double>(allocated.memory));
  allocated_.Add({{"resource", "pids"}}).Set(static_cast<double>(allocated.pids));
}

void ControllerMetrics::ObserveStore(absl::string_view op, absl::Duration duration) {
  store_.Add({{"op", std::string(op)}}, LatencyBuckets()).Observe(absl::ToDoubleSeconds(duration));
}

std::string ControllerMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace moat::controller
