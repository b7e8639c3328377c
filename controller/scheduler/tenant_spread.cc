// Score: fewer of the tenant's sandboxes on a node is better, so one node's loss costs a tenant
// less: 100 with none, 100/(n+1) with n.
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {
namespace {

class TenantSpreadScore final : public ScorePlugin {
 public:
  absl::string_view Name() const override { return "TenantSpread"; }
  int Score(const SandboxRequest& request, const NodeInfo& node, const Snapshot&) const override {
    auto it = node.tenant_sandboxes.find(request.tenant);
    int n = it == node.tenant_sandboxes.end() ? 0 : it->second;
    return 100 / (n + 1);
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> NewTenantSpreadScore() {
  return std::make_unique<TenantSpreadScore>();
}

}  // namespace moat::controller::scheduler
