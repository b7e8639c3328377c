#include "node-agent/backend/backend.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moat::agent {

CleanupReport& CleanupReport::operator+=(const CleanupReport& other) {
  processes_killed += other.processes_killed;
  cgroups_removed += other.cgroups_removed;
  mounts_unmounted += other.mounts_unmounted;
  workspaces_removed += other.workspaces_removed;
  residue.insert(residue.end(), other.residue.begin(), other.residue.end());
  return *this;
}

std::string CleanupReport::ToString() const {
  std::string out = absl::StrCat("killed ", processes_killed, " processes, removed ",
                                 cgroups_removed, " cgroups, unmounted ", mounts_unmounted,
                                 " mounts, removed ", workspaces_removed, " workspaces");
  if (!residue.empty()) absl::StrAppend(&out, "; left behind: ", absl::StrJoin(residue, ", "));
  return out;
}

bool IsValidSandboxId(absl::string_view id) {
  if (id.size() < 4 || id.size() > 64 || !absl::StartsWith(id, "sb-")) return false;
  for (char c : id.substr(3)) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

}  // namespace moat::agent
