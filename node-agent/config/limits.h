// Resource limits of one sandbox, shared by the config (a profile's defaults), the API (a request
// may tighten them) and the backend (which enforces them). Zero means "no limit of this kind".
#pragma once

#include <cstdint>

namespace moat::agent {

struct Limits {
  double cpus = 0;               // CPU quota in cores (1.5 = one and a half cores).
  uint64_t memory_bytes = 0;     // Memory (cgroup memory.max / memory.limit_in_bytes).
  uint64_t pids = 0;             // Tasks in the sandbox's cgroup.
  uint64_t workspace_bytes = 0;  // Size of the tmpfs behind /workspace.

  bool operator==(const Limits&) const = default;
};

// True if every limit of `inner` is at most the matching limit of `outer` (a zero in `outer` is
// unlimited, a zero in `inner` under a non-zero `outer` is not "at most").
inline bool WithinLimits(const Limits& inner, const Limits& outer) {
  auto within = [](auto in, auto out) { return out == 0 || (in != 0 && in <= out); };
  return within(inner.cpus, outer.cpus) && within(inner.memory_bytes, outer.memory_bytes) &&
         within(inner.pids, outer.pids) && within(inner.workspace_bytes, outer.workspace_bytes);
}

}  // namespace moat::agent
