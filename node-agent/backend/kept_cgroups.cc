#include "node-agent/backend/kept_cgroups.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "node-agent/backend/backend.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/cgroup/cgroup_fs.h"

namespace moat::agent {
namespace {

namespace cgroupfs = sandbox::cgroupfs;

// When the directory was made or last changed (kernfs stamps an inode when it is instantiated:
// at the cgroup's mkdir, or at a later look if the inode was evicted meanwhile, which only makes
// it look younger); InfiniteFuture if it cannot be read, so that it is taken as young.
absl::Time ChangedAt(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return absl::InfiniteFuture();
  return std::max(absl::TimeFromTimespec(st.st_mtim), absl::TimeFromTimespec(st.st_ctim));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RemoveUnusedKeptCgroups(
    const sandbox::CgroupLayout& layout, const std::function<bool(absl::string_view id)>& in_use,
    absl::Duration min_age, absl::Time now) {
  // keep-<id> -> its directory in each hierarchy this agent makes sandboxes' cgroups in.
  const std::map<std::string, std::vector<std::string>> kept = sandbox::MoatCgroupsByName(
      layout, [](absl::string_view name) { return absl::StartsWith(name, kKeptCgroupPrefix); });
  std::vector<std::string> removed, failures;
  for (const auto& [name, dirs] : kept) {
    const absl::string_view id = absl::string_view(name).substr(sizeof(kKeptCgroupPrefix) - 1);
    // Names moat never makes are nobody's to judge here.
    if (!IsValidSandboxId(id) || in_use(id)) continue;
    bool leave = false;
    for (const std::string& dir : dirs) {
      absl::StatusOr<std::vector<pid_t>> pids = cgroupfs::ListProcesses(dir);
      if (!pids.ok() || !pids->empty() || now - ChangedAt(dir) < min_age) leave = true;
    }
    if (leave) continue;
    for (const std::string& dir : dirs) {
      // One try and a short wait: a process that entered meanwhile makes rmdir fail (EBUSY),
      // and the kernel never removes a cgroup that holds one.
      absl::Status gone = cgroupfs::RemoveTree(dir, absl::Milliseconds(100));
      if (gone.ok()) {
        removed.push_back(dir);
      } else {
        failures.push_back(absl::StrCat("\"", dir, "\": ", gone.message()));
      }
    }
  }
  if (!failures.empty()) {
    return absl::InternalError(absl::StrCat(
        "remove the cgroups of kept sandboxes nothing names: ", failures.size(),
        " could not be removed (", removed.size(), " were): ", absl::StrJoin(failures, "; ")));
  }
  return removed;
}

}  // namespace moat::agent
