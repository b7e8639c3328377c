// Score: a node with a warm sandbox of the request's profile ready starts it in ~2 ms instead of
// a cold start's tens of milliseconds: 100 if it has one, 0 if not. The scheduler weighs this
// above the others (scheduler.cc), so a warm node wins unless none has one.
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {
namespace {

class WarmPoolScore final : public ScorePlugin {
 public:
  absl::string_view Name() const override { return "WarmPool"; }
  int Score(const SandboxRequest& request, const NodeInfo& node, const Snapshot&) const override {
    auto it = node.warm.find(request.profile);
    return it != node.warm.end() && it->second > 0 ? 100 : 0;
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> NewWarmPoolScore() { return std::make_unique<WarmPoolScore>(); }

}  // namespace moat::controller::scheduler
