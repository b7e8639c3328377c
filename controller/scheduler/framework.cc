#include "controller/scheduler/framework.h"

#include <algorithm>

namespace moat::controller::scheduler {

Resources& Resources::operator-=(const Resources& o) {
  cpu = std::max(0.0, cpu - o.cpu);
  memory = memory > o.memory ? memory - o.memory : 0;
  pids = pids > o.pids ? pids - o.pids : 0;
  return *this;
}

absl::string_view NodeStateName(NodeState state) {
  switch (state) {
    case NodeState::kReady:
      return "Ready";
    case NodeState::kNotReady:
      return "NotReady";
    case NodeState::kLost:
      return "Lost";
  }
  return "Unknown";
}

std::string NormalizeArch(absl::string_view arch) {
  if (arch == "amd64" || arch == "x86-64") return "x86_64";
  if (arch == "arm64") return "aarch64";
  return std::string(arch);
}

}  // namespace moat::controller::scheduler
