#include "sandbox/cgroup/cgroup_detach.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

bool HoldsAny(const std::string& hierarchy, const std::vector<std::string>& own) {
  const std::string prefix = absl::StrCat(hierarchy, "/");
  return std::any_of(own.begin(), own.end(),
                     [&](const std::string& dir) { return absl::StartsWith(dir, prefix); });
}

// A new v1 cpuset cgroup starts with no cpus and no mems (unless its parent has
// cgroup.clone_children set): give it the parent's.
absl::Status InheritCpuset(const std::string& parent, const std::string& dir) {
  for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
    const std::string path = absl::StrCat(dir, "/", file);
    if (!cgroupfs::Exists(path)) return absl::OkStatus();  // not a cpuset hierarchy
    ASSIGN_OR_RETURN(std::string current, cgroupfs::ReadFile(path));
    if (!absl::StripAsciiWhitespace(current).empty()) continue;
    ASSIGN_OR_RETURN(std::string inherited, cgroupfs::ReadFile(absl::StrCat(parent, "/", file)));
    RETURN_IF_ERROR(cgroupfs::WriteFile(path, absl::StripAsciiWhitespace(inherited)));
  }
  return absl::OkStatus();
}

absl::Status DetachIn(const std::string& hierarchy, pid_t pid) {
  std::string parent = hierarchy;
  for (const char* part : {cgroupfs::kMoatDir, kDetachedCgroup}) {
    const std::string dir = absl::StrCat(parent, "/", part);
    RETURN_IF_ERROR(cgroupfs::MakeDir(dir).status());
    RETURN_IF_ERROR(InheritCpuset(parent, dir));
    parent = dir;
  }
  return cgroupfs::WriteFile(absl::StrCat(parent, "/cgroup.procs"), absl::StrCat(pid));
}

}  // namespace

absl::Status DetachFromCreator(const CgroupLayout& layout, pid_t pid,
                               const std::vector<std::string>& own) {
  std::vector<std::string> hierarchies(layout.v1_hierarchies.begin(), layout.v1_hierarchies.end());
  const std::string& v2 = layout.v2_parent.empty() ? layout.v2_mount : layout.v2_parent;
  if (!v2.empty()) hierarchies.push_back(v2);
  for (const std::string& hierarchy : hierarchies) {
    if (HoldsAny(hierarchy, own)) continue;
    if (absl::Status moved = DetachIn(hierarchy, pid); !moved.ok()) {
      return absl::Status(
          moved.code(),
          absl::StrCat("move process ", pid, " out of its creator's cgroup in hierarchy \"",
                       hierarchy,
                       "\" (so that it outlives its creator's container): ", moved.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace moat::sandbox
