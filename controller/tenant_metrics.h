// The tenants' and the pre-check's metrics, in the controller's registry (metrics.h). Tenant
// names are labels: a fleet has few tenants (docs/metrics.md). SetUsage is called from one
// thread (main's tick); the rest are thread-safe (prometheus-cpp's metrics are).
#pragma once

#include <map>
#include <string>

#include "controller/precheck/approvals.h"
#include "controller/tenants/quota.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace moat::controller {

class TenantMetrics {
 public:
  explicit TenantMetrics(prometheus::Registry& registry);

  // Usage by tenant (Pending and Running sandboxes); a tenant missing from `usage` shows 0.
  void SetUsage(const std::map<std::string, TenantUsage>& usage);
  void CountQuotaRejection(const std::string& tenant, absl::string_view quota);
  void CountScan(precheck::Risk risk);
  void SetApprovals(const precheck::ApprovalCounts& counts);

 private:
  prometheus::Family<prometheus::Gauge>& sandboxes_;
  prometheus::Family<prometheus::Gauge>& cpu_;
  prometheus::Family<prometheus::Gauge>& memory_;
  prometheus::Family<prometheus::Counter>& rejections_;
  prometheus::Family<prometheus::Counter>& scans_;
  prometheus::Gauge& pending_;
  prometheus::Family<prometheus::Gauge>& decided_;
  std::map<std::string, TenantUsage> last_;  // Tenants seen, so a tenant gone to zero shows 0.
};

}  // namespace moat::controller
