// Filter: every taint of the node is tolerated by the request (Kubernetes' NoSchedule). A
// toleration with an empty value tolerates the key with any value ("Exists").
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {
namespace {

bool Tolerates(const std::vector<Toleration>& tolerations, const Taint& taint) {
  for (const Toleration& t : tolerations) {
    if (t.key == taint.key && (t.value.empty() || t.value == taint.value)) return true;
  }
  return false;
}

class TaintTolerationFilter final : public FilterPlugin {
 public:
  absl::string_view Name() const override { return "TaintToleration"; }
  FilterResult Filter(const SandboxRequest& request, const NodeInfo& node,
                      const Snapshot&) const override {
    for (const Taint& taint : node.taints) {
      if (!Tolerates(request.tolerations, taint)) return {"untolerated taint " + taint.key};
    }
    return {};
  }
};

}  // namespace

std::unique_ptr<FilterPlugin> NewTaintTolerationFilter() {
  return std::make_unique<TaintTolerationFilter>();
}

}  // namespace moat::controller::scheduler
