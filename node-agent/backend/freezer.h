// Pause and resume of a whole sandbox: the cgroup freezer stops every process of its cgroup
// where it is (no signal it could catch or see) and thaws it later.
//
// cgroup v1: <freezer hierarchy>/.../freezer.state, written FROZEN or THAWED; it reads FREEZING
// until every task has stopped. cgroup v2: cgroup.freeze, written 1 or 0; cgroup.events says
// "frozen 1" once done. When a sandbox's cgroup has a v1 freezer directory, that one is used
// (this machine kind is hybrid: the v2 part holds no controller of the sandbox's).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace moat::agent {

// Freezes (or thaws) the cgroup whose directories are `dirs` and waits until the kernel reports
// it done, up to `timeout` (Unavailable then, with the state reached). FailedPrecondition if no
// directory has a freezer.
absl::Status SetFrozen(const std::vector<std::string>& dirs, bool frozen,
                       absl::Duration timeout = absl::Seconds(5));

}  // namespace moat::agent
