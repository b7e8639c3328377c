// Filter: the request fits in what the node has left, with allocatable capacity multiplied by
// the overcommit ratios. Requests of zero of a resource always fit it.
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {

FilterResult FitsResources(const Resources& request, const NodeInfo& node,
                           const Overcommit& overcommit) {
  // A small epsilon so that 4 x 0.5 CPU fit in 2 cores despite rounding.
  constexpr double kEpsilon = 1e-9;
  if (request.cpu > 0 &&
      node.allocated.cpu + request.cpu > node.allocatable.cpu * overcommit.cpu + kEpsilon) {
    return {"insufficient cpu"};
  }
  if (request.memory > 0 && static_cast<double>(node.allocated.memory + request.memory) >
                                static_cast<double>(node.allocatable.memory) * overcommit.memory) {
    return {"insufficient memory"};
  }
  if (request.pids > 0 && node.allocatable.pids > 0 &&
      static_cast<double>(node.allocated.pids + request.pids) >
          static_cast<double>(node.allocatable.pids) * overcommit.pids) {
    return {"insufficient pids"};
  }
  return {};
}

namespace {

class ResourcesFitFilter final : public FilterPlugin {
 public:
  absl::string_view Name() const override { return "ResourcesFit"; }
  FilterResult Filter(const SandboxRequest& request, const NodeInfo& node,
                      const Snapshot& snapshot) const override {
    return FitsResources(request.resources, node, snapshot.overcommit);
  }
};

}  // namespace

std::unique_ptr<FilterPlugin> NewResourcesFitFilter() {
  return std::make_unique<ResourcesFitFilter>();
}

}  // namespace moat::controller::scheduler
