// Test helper: the scheduler's inputs as most of its tests start from them: an x86-64 node with
// 2 cores, 8 GiB and 1000 pids offering the "default" profile, and a request of tenant "t1" for
// one core and 2 GiB of that profile. Tests change the fields they are about.
#pragma once

#include <cstdint>
#include <string>

#include "controller/scheduler/framework.h"

namespace moat::controller::scheduler::testing {

inline constexpr uint64_t kGiB = 1ULL << 30;

inline NodeInfo Node(std::string name = "n1", std::string arch = "x86_64") {
  NodeInfo n;
  n.name = std::move(name);
  n.arch = std::move(arch);
  n.allocatable = {2, 8 * kGiB, 1000};
  n.profiles = {"default"};
  return n;
}

inline SandboxRequest Request(uint64_t pids = 100) {
  SandboxRequest r;
  r.tenant = "t1";
  r.profile = "default";
  r.resources = {1, 2 * kGiB, pids};
  return r;
}

}  // namespace moat::controller::scheduler::testing
