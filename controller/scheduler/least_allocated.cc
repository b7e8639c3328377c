// Score: the share of the node's (overcommitted) CPU and memory left free once the request is
// placed, averaged: 100 for an empty node, 0 for a full one. Spreads load across the fleet.
#include <algorithm>

#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {
namespace {

double FreeShare(double allocated, double request, double capacity) {
  if (capacity <= 0) return 0;
  return std::clamp(1.0 - (allocated + request) / capacity, 0.0, 1.0);
}

class LeastAllocatedScore final : public ScorePlugin {
 public:
  absl::string_view Name() const override { return "LeastAllocated"; }
  int Score(const SandboxRequest& request, const NodeInfo& node,
            const Snapshot& snapshot) const override {
    double cpu = FreeShare(node.allocated.cpu, request.resources.cpu,
                           node.allocatable.cpu * snapshot.overcommit.cpu);
    double memory = FreeShare(
        static_cast<double>(node.allocated.memory), static_cast<double>(request.resources.memory),
        static_cast<double>(node.allocatable.memory) * snapshot.overcommit.memory);
    return static_cast<int>((cpu + memory) / 2 * 100 + 0.5);
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> NewLeastAllocatedScore() {
  return std::make_unique<LeastAllocatedScore>();
}

}  // namespace moat::controller::scheduler
