#include "node-agent/metrics.h"

#include "prometheus/text_serializer.h"

namespace moat::agent {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Seconds: from a warm start (~1 ms) to a slow cold one or a long command.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
  return kBuckets;
}

}  // namespace

AgentMetrics::AgentMetrics(const std::vector<std::string>& profiles)
    : registry_(std::make_shared<prometheus::Registry>()),
      sandboxes_(BuildGauge()
                     .Name("moat_sandboxes")
                     .Help("Sandboxes on this node by state.")
                     .Register(*registry_)),
      pool_depth_(BuildGauge()
                      .Name("moat_pool_depth")
                      .Help("Warm sandboxes ready in the pool, per profile.")
                      .Register(*registry_)),
      pool_target_(BuildGauge()
                       .Name("moat_pool_target")
                       .Help("Warm sandboxes the pool aims to keep, per profile.")
                       .Register(*registry_)),
      pool_misses_(BuildCounter()
                       .Name("moat_pool_misses_total")
                       .Help("Create requests for a profile's defaults that found its warm pool "
                             "empty and were made cold.")
                       .Register(*registry_)),
      recycle_backlog_(BuildGauge()
                           .Name("moat_recycle_backlog")
                           .Help("Sandboxes waiting in the recycle queue.")
                           .Register(*registry_)
                           .Add({})),
      recycle_duration_(BuildHistogram()
                            .Name("moat_recycle_duration_seconds")
                            .Help("Time to recycle one sandbox: kill, unmount, verify, remove.")
                            .Register(*registry_)
                            .Add({}, LatencyBuckets())),
      violations_(BuildCounter()
                      .Name("moat_violations_total")
                      .Help("Policy violations seen by the probes, by kind.")
                      .Register(*registry_)),
      compromised_(BuildCounter()
                       .Name("moat_compromised_sandboxes_total")
                       .Help("Sandboxes declared compromised (missed heartbeats) and recycled.")
                       .Register(*registry_)
                       .Add({})),
      heartbeat_misses_(BuildCounter()
                            .Name("moat_heartbeat_misses_total")
                            .Help("Probe heartbeats that did not arrive in time.")
                            .Register(*registry_)
                            .Add({})),
      start_(BuildHistogram()
                 .Name("moat_sandbox_start_seconds")
                 .Help("Time from a create request to a usable sandbox, warm (from the pool) or "
                       "cold.")
                 .Register(*registry_)),
      command_duration_(BuildHistogram()
                            .Name("moat_command_duration_seconds")
                            .Help("Wall time of commands run through the per-sandbox API.")
                            .Register(*registry_)
                            .Add({}, LatencyBuckets())),
      egress_requests_(BuildCounter()
                           .Name("moat_egress_requests_total")
                           .Help("Requests sandboxes made through their egress proxies.")
                           .Register(*registry_)
                           .Add({})),
      egress_denials_(BuildCounter()
                          .Name("moat_egress_denials_total")
                          .Help("Egress requests the proxies refused.")
                          .Register(*registry_)
                          .Add({})),
      cpu_capacity_(BuildGauge()
                        .Name("moat_node_cpu_capacity_cores")
                        .Help("CPU cores of the node.")
                        .Register(*registry_)
                        .Add({})),
      cpu_allocated_(BuildGauge()
                         .Name("moat_node_cpu_allocated_cores")
                         .Help("Sum of the CPU quotas of the node's sandboxes, in cores.")
                         .Register(*registry_)
                         .Add({})),
      memory_capacity_(BuildGauge()
                           .Name("moat_node_memory_capacity_bytes")
                           .Help("Memory of the node.")
                           .Register(*registry_)
                           .Add({})),
      memory_used_(BuildGauge()
                       .Name("moat_node_memory_used_bytes")
                       .Help("Memory used by the node's sandboxes (their cgroups).")
                       .Register(*registry_)
                       .Add({})),
      pids_capacity_(BuildGauge()
                         .Name("moat_node_pids_capacity")
                         .Help("Processes the node allows (kernel pid_max).")
                         .Register(*registry_)
                         .Add({})),
      pids_used_(BuildGauge()
                     .Name("moat_node_pids_used")
                     .Help("Processes in the node's sandboxes.")
                     .Register(*registry_)
                     .Add({})) {
  for (SandboxState state : kAllStates) {
    sandboxes_by_state_[state] = &sandboxes_.Add({{"state", std::string(StateName(state))}});
  }
  for (const std::string& profile : profiles) {
    depth_by_profile_[profile] = &pool_depth_.Add({{"profile", profile}});
    target_by_profile_[profile] = &pool_target_.Add({{"profile", profile}});
    misses_by_profile_[profile] = &pool_misses_.Add({{"profile", profile}});
  }
  for (absl::string_view kind : kViolationKinds) {
    violations_by_kind_[std::string(kind)] = &violations_.Add({{"kind", std::string(kind)}});
  }
  start_warm_ = &start_.Add({{"path", "warm"}}, LatencyBuckets());
  start_cold_ = &start_.Add({{"path", "cold"}}, LatencyBuckets());
}

void AgentMetrics::SetSandboxes(const std::map<SandboxState, int>& counts) {
  for (const auto& [state, gauge] : sandboxes_by_state_) {
    auto it = counts.find(state);
    gauge->Set(it == counts.end() ? 0 : it->second);
  }
}

void AgentMetrics::SetPoolDepth(absl::string_view profile, int depth) {
  auto it = depth_by_profile_.find(profile);
  if (it != depth_by_profile_.end()) it->second->Set(depth);
}

void AgentMetrics::SetPoolTarget(absl::string_view profile, int target) {
  auto it = target_by_profile_.find(profile);
  if (it != target_by_profile_.end()) it->second->Set(target);
}

void AgentMetrics::AddPoolMiss(absl::string_view profile) {
  auto it = misses_by_profile_.find(profile);
  if (it != misses_by_profile_.end()) it->second->Increment();
}

void AgentMetrics::SetRecycleBacklog(int backlog) { recycle_backlog_.Set(backlog); }

void AgentMetrics::ObserveRecycle(absl::Duration d) {
  recycle_duration_.Observe(absl::ToDoubleSeconds(d));
}

void AgentMetrics::AddViolation(absl::string_view kind) {
  auto it = violations_by_kind_.find(kind);
  if (it == violations_by_kind_.end()) it = violations_by_kind_.find("other");
  it->second->Increment();
}

void AgentMetrics::AddCompromised() { compromised_.Increment(); }
void AgentMetrics::AddHeartbeatMiss() { heartbeat_misses_.Increment(); }

void AgentMetrics::ObserveStart(StartPath path, absl::Duration d) {
  (path == StartPath::kWarm ? start_warm_ : start_cold_)->Observe(absl::ToDoubleSeconds(d));
}

void AgentMetrics::ObserveCommand(absl::Duration d) {
  command_duration_.Observe(absl::ToDoubleSeconds(d));
}

void AgentMetrics::AddEgressRequest() { egress_requests_.Increment(); }
void AgentMetrics::AddEgressDenial() { egress_denials_.Increment(); }

void AgentMetrics::SetNodeUsage(const NodeUsage& usage) {
  cpu_capacity_.Set(usage.cpu_cores);
  cpu_allocated_.Set(usage.cpu_cores_allocated);
  memory_capacity_.Set(static_cast<double>(usage.memory_bytes));
  memory_used_.Set(static_cast<double>(usage.memory_bytes_used));
  pids_capacity_.Set(static_cast<double>(usage.pids_max));
  pids_used_.Set(static_cast<double>(usage.pids_used));
}

std::string AgentMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace moat::agent
