// Filter: the node's architecture is the one the request asks for (platform.arch), if any.
#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler {
namespace {

// The names people write in requests ("arm64", "amd64"), for the reason.
std::string DisplayArch(const std::string& arch) {
  if (arch == "aarch64") return "arm64";
  if (arch == "x86_64") return "amd64";
  return arch;
}

class ArchFilter final : public FilterPlugin {
 public:
  absl::string_view Name() const override { return "Arch"; }
  FilterResult Filter(const SandboxRequest& request, const NodeInfo& node,
                      const Snapshot&) const override {
    if (request.arch.empty() || request.arch == node.arch) return {};
    return {"no " + DisplayArch(request.arch)};
  }
};

}  // namespace

std::unique_ptr<FilterPlugin> NewArchFilter() { return std::make_unique<ArchFilter>(); }

}  // namespace moat::controller::scheduler
