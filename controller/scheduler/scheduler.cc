#include "controller/scheduler/scheduler.h"

#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moat::controller::scheduler {

Scheduler::Scheduler(SchedulerOptions options) : options_(options) {
  // Cheapest and most selective first: most nodes that fail, fail early.
  filters_.push_back(NewNodeReadyFilter());
  filters_.push_back(NewArchFilter());
  filters_.push_back(NewProfilePresentFilter());
  filters_.push_back(NewNodeSelectorFilter());
  filters_.push_back(NewTaintTolerationFilter());
  filters_.push_back(NewResourcesFitFilter());
  scores_.push_back({NewWarmPoolScore(), options_.warm_pool_weight});
  scores_.push_back({NewLeastAllocatedScore(), options_.least_allocated_weight});
  scores_.push_back({NewTenantSpreadScore(), options_.tenant_spread_weight});
}

absl::StatusOr<Decision> Scheduler::Schedule(const Snapshot& snapshot,
                                             const SandboxRequest& request, uint64_t seed) const {
  const size_t n = snapshot.nodes.size();
  if (n == 0) return absl::ResourceExhaustedError("0/0 nodes: no node has joined");
  const size_t wanted = options_.best_of_k > 0 ? static_cast<size_t>(options_.best_of_k) : n;
  const size_t start = options_.best_of_k > 0 ? seed % n : 0;
  std::map<std::string, int> reasons;  // Ordered, so the message reads the same every time.
  Decision best;
  int best_score = -1;
  size_t feasible = 0, evaluated = 0;
  for (size_t step = 0; step < n && feasible < wanted; ++step) {
    const size_t i = (start + step) % n;
    const NodeInfo& node = *snapshot.nodes[i];
    ++evaluated;
    if (request.excluded_nodes.contains(node.name)) {
      ++reasons["failed this request before"];
      continue;
    }
    std::string reason;
    for (const auto& filter : filters_) {
      FilterResult r = filter->Filter(request, node, snapshot);
      if (!r.fits()) {
        reason = std::move(r.reason);
        break;
      }
    }
    if (!reason.empty()) {
      ++reasons[reason];
      continue;
    }
    ++feasible;
    int score = 0;
    for (const WeightedScore& s : scores_) {
      score += s.weight * s.plugin->Score(request, node, snapshot);
    }
    if (score > best_score) {
      best_score = score;
      best.node = node.name;
      best.node_index = static_cast<int>(i);
    }
  }
  if (feasible == 0) {
    std::vector<std::string> parts;
    for (const auto& [reason, count] : reasons) parts.push_back(absl::StrCat(count, " ", reason));
    return absl::ResourceExhaustedError(
        absl::StrCat("0/", n, " nodes: ", absl::StrJoin(parts, ", ")));
  }
  best.score = best_score;
  best.evaluated = static_cast<int>(evaluated);
  return best;
}

}  // namespace moat::controller::scheduler
