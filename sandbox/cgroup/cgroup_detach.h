// Taking a process out of its creator's cgroups, for sandboxes that outlive their agent
// (restart_grace, docs/agent.md).
//
// A sandbox's init has cgroups of its own only in the hierarchies that give it limits
// (PlanCgroup: cpu, memory, pids, freezer); in every other hierarchy (v1 devices, net_cls,
// name=systemd, ...; the cgroup2 one on a host where it offers no controller) it inherits its
// creator's. That does not matter under systemd, which stops only the agent (KillMode=process),
// but it does in a container: a runtime that stops the agent's container kills everything
// listed in the container's cgroup (runc's `kill --all` reads the v1 devices hierarchy, or the
// v2 cgroup), sandboxes included. So each process that is to outlive the agent (init, and the
// probe that holds its seccomp listener) moves to `<hierarchy>/moat/detached` wherever it has no
// cgroup of its own. `detached` is named after no process: the stale-cgroup cleanups keep it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sandbox/cgroup/cgroup.h"

namespace moat::sandbox {

inline constexpr char kDetachedCgroup[] = "detached";

// Moves `pid` (its whole thread group) into `<hierarchy>/moat/detached` in every hierarchy of
// `layout` (each of v1_hierarchies, and v2_parent) that holds none of `own` (the process's own
// cgroup directories, Cgroup::paths(); empty for a process with none). Creates the directories;
// in a v1 cpuset hierarchy they get their parent's cpus and mems first, without which no task
// may join. Errors name the hierarchy; the process may then be detached from some hierarchies
// and not others.
absl::Status DetachFromCreator(const CgroupLayout& layout, pid_t pid,
                               const std::vector<std::string>& own);

}  // namespace moat::sandbox
