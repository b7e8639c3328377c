#include "controller/tenant_metrics.h"

namespace moat::controller {

TenantMetrics::TenantMetrics(prometheus::Registry& registry)
    : sandboxes_(prometheus::BuildGauge()
                     .Name("moat_controller_tenant_sandboxes")
                     .Help("Sandboxes a tenant holds (Pending and Running)")
                     .Register(registry)),
      cpu_(prometheus::BuildGauge()
               .Name("moat_controller_tenant_cpu_cores")
               .Help("CPU cores a tenant's sandboxes request")
               .Register(registry)),
      memory_(prometheus::BuildGauge()
                  .Name("moat_controller_tenant_memory_bytes")
                  .Help("Memory a tenant's sandboxes request")
                  .Register(registry)),
      rejections_(prometheus::BuildCounter()
                      .Name("moat_controller_quota_rejections_total")
                      .Help("Creates refused by a tenant quota, by tenant and quota")
                      .Register(registry)),
      scans_(prometheus::BuildCounter()
                 .Name("moat_controller_precheck_scans_total")
                 .Help("Commands the pre-check scanned, by the risk it found")
                 .Register(registry)),
      pending_(prometheus::BuildGauge()
                   .Name("moat_controller_approvals_pending")
                   .Help("High-risk commands waiting in PendingApproval")
                   .Register(registry)
                   .Add({})),
      decided_(prometheus::BuildGauge()
                   .Name("moat_controller_approvals_decided")
                   .Help("Held commands decided since start, by outcome (a running count)")
                   .Register(registry)) {}

void TenantMetrics::SetUsage(const std::map<std::string, TenantUsage>& usage) {
  for (auto& [tenant, u] : last_) u = {};
  for (const auto& [tenant, u] : usage) last_[tenant] = u;
  for (const auto& [tenant, u] : last_) {
    sandboxes_.Add({{"tenant", tenant}}).Set(u.sandboxes);
    cpu_.Add({{"tenant", tenant}}).Set(u.cpu);
    memory_.Add({{"tenant", tenant}}).Set(static_cast<double>(u.memory));
  }
}

void TenantMetrics::CountQuotaRejection(const std::string& tenant, absl::string_view quota) {
  rejections_.Add({{"tenant", tenant}, {"quota", std::string(quota)}}).Increment();
}

void TenantMetrics::CountScan(precheck::Risk risk) {
  scans_.Add({{"risk", std::string(precheck::RiskName(risk))}}).Increment();
}

void TenantMetrics::SetApprovals(const precheck::ApprovalCounts& counts) {
  pending_.Set(counts.pending);
  decided_.Add({{"outcome", "approved"}}).Set(static_cast<double>(counts.approved));
  decided_.Add({{"outcome", "rejected"}}).Set(static_cast<double>(counts.rejected));
  decided_.Add({{"outcome", "timed_out"}}).Set(static_cast<double>(counts.timed_out));
}

}  // namespace moat::controller
