// Filter: only Ready, uncordoned nodes take new sandboxes.
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {
namespace {

class NodeReadyFilter final : public FilterPlugin {
 public:
  absl::string_view Name() const override { return "NodeReady"; }
  FilterResult Filter(const SandboxRequest&, const NodeInfo& node, const Snapshot&) const override {
    if (node.state != NodeState::kReady) return {"not ready"};
    if (node.cordoned) return {"cordoned"};
    return {};
  }
};

}  // namespace

std::unique_ptr<FilterPlugin> NewNodeReadyFilter() { return std::make_unique<NodeReadyFilter>(); }

}  // namespace moat::controller::scheduler
