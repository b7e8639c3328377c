// Runs the plugins of framework.h for one request against one snapshot and picks a node.
//
// Large fleets: best-of-K. Filtering every one of 1000 nodes for every request wastes time the
// answer does not need (E2B samples; Kubernetes stops at percentageOfNodesToScore). With
// best_of_k > 0 the scheduler walks the nodes from a random start and stops once K of them fit;
// only those are scored. A request no node fits has walked them all, so its reason counts
// every node.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {

struct Decision {
  std::string node;
  int node_index = 0;  // In the snapshot.
  int score = 0;       // Weighted sum of the score plugins.
  int evaluated = 0;   // Nodes filtered to reach the decision.
};

struct SchedulerOptions {
  int best_of_k = 20;  // 0: filter and score every node.
  // Weight of each score plugin. The warm pool dominates: a warm start is ~2 ms, a cold one
  // tens of milliseconds, far more than any balance is worth.
  int warm_pool_weight = 10;
  int least_allocated_weight = 1;
  int tenant_spread_weight = 1;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options = {});

  // The best node for `request`, or ResourceExhausted with a reason a person can read:
  // "0/3 nodes: 2 insufficient memory, 1 no arm64". `seed` picks where the walk
  // starts (callers pass a random number; tests a fixed one). Thread-safe.
  absl::StatusOr<Decision> Schedule(const Snapshot& snapshot, const SandboxRequest& request,
                                    uint64_t seed) const;

 private:
  struct WeightedScore {
    std::unique_ptr<ScorePlugin> plugin;
    int weight;
  };
  SchedulerOptions options_;
  std::vector<std::unique_ptr<FilterPlugin>> filters_;
  std::vector<WeightedScore> scores_;
};

}  // namespace moat::controller::scheduler
