// The cgroups of kept sandboxes (`<hierarchy>/moat/keep-<id>`, kernel_backend.h) that nothing
// names any more. A kept sandbox's cgroup is named after no agent, so the stale-cgroup cleanup
// (sandbox::CleanupStaleCgroups, which goes by the creator's pid) never removes it; only its
// record (<state_dir>/sandboxes/<id>.json) leads an agent to it. A kept sandbox that ends by
// itself after its grace while no agent runs leaves its cgroup empty, and when its state dir is
// gone too (a test's fleet, a node re-imaged with the same cgroup tree) nothing ever would.
//
// The agent owns them: at start and whenever one of its kept sandboxes ends, it removes each
// keep-* cgroup that
//   - is under the moat/ directory of its own layout's hierarchies (nowhere else),
//   - holds no process, in itself or below, in any hierarchy (a kept sandbox during its grace,
//     of this agent or another, has its init there),
//   - names no sandbox `in_use` says is alive or recorded (this agent's), and
//   - is older than `min_age` (its inode's change time): another agent makes its new sandbox's
//     cgroup a moment before the sandbox's first process enters it. kernfs stamps an inode when
//     it is instantiated, so one the kernel had evicted looks new at the next look and goes at a
//     later sweep (erring towards keeping).
// Another agent's live sandbox is never touched: it is not empty.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sandbox/cgroup/cgroup.h"

namespace moat::agent {

inline constexpr char kKeptCgroupPrefix[] = "keep-";
inline constexpr absl::Duration kKeptCgroupMinAge = absl::Seconds(30);

// Removes the unused keep-* cgroups (above) of `layout` and returns the directories removed.
// `in_use(id)`: the sandbox id is this agent's or has a record. Errors: the cgroups that could
// not be removed (the others are removed still).
absl::StatusOr<std::vector<std::string>> RemoveUnusedKeptCgroups(
    const sandbox::CgroupLayout& layout, const std::function<bool(absl::string_view id)>& in_use,
    absl::Duration min_age = kKeptCgroupMinAge, absl::Time now = absl::Now());

}  // namespace moat::agent
