// Filter: the node carries every label of the request's node selector, with the same value.
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {
namespace {

class NodeSelectorFilter final : public FilterPlugin {
 public:
  absl::string_view Name() const override { return "NodeSelector"; }
  FilterResult Filter(const SandboxRequest& request, const NodeInfo& node,
                      const Snapshot&) const override {
    for (const auto& [key, value] : request.node_selector) {
      auto it = node.labels.find(key);
      if (it == node.labels.end() || it->second != value) return {"labels do not match"};
    }
    return {};
  }
};

}  // namespace

std::unique_ptr<FilterPlugin> NewNodeSelectorFilter() {
  return std::make_unique<NodeSelectorFilter>();
}

}  // namespace moat::controller::scheduler
