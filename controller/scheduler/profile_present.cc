// Filter: the node's agent serves the request's profile (image.uri maps to it in the config).
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {
namespace {

class ProfilePresentFilter final : public FilterPlugin {
 public:
  absl::string_view Name() const override { return "ProfilePresent"; }
  FilterResult Filter(const SandboxRequest& request, const NodeInfo& node,
                      const Snapshot&) const override {
    if (node.profiles.contains(request.profile)) return {};
    return {"no profile " + request.profile};
  }
};

}  // namespace

std::unique_ptr<FilterPlugin> NewProfilePresentFilter() {
  return std::make_unique<ProfilePresentFilter>();
}

}  // namespace moat::controller::scheduler
