#include "node-agent/backend/freezer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "util/status_macros.h"

namespace moat::agent {
namespace {

namespace cgroupfs = sandbox::cgroupfs;

// Whether the freezer file `path` says the work is done.
bool Done(const std::string& path, bool v1, bool frozen) {
  absl::StatusOr<std::string> text = cgroupfs::ReadFile(path);
  if (!text.ok()) return false;
  if (v1) return absl::StripAsciiWhitespace(*text) == (frozen ? "FROZEN" : "THAWED");
  // cgroup.events: "populated 1\nfrozen 1\n".
  return absl::StrContains(*text, frozen ? "frozen 1" : "frozen 0");
}

}  // namespace

absl::Status SetFrozen(const std::vector<std::string>& dirs, bool frozen, absl::Duration timeout) {
  std::vector<std::string> v1, v2;
  for (const std::string& dir : dirs) {
    if (cgroupfs::Exists(dir + "/freezer.state")) v1.push_back(dir);
    if (cgroupfs::Exists(dir + "/cgroup.freeze")) v2.push_back(dir);
  }
  const bool use_v1 = !v1.empty();
  const std::vector<std::string>& targets = use_v1 ? v1 : v2;
  if (targets.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the sandbox's cgroup (", absl::StrJoin(dirs, ", "),
        ") has no freezer (neither a v1 freezer hierarchy nor cgroup v2); mount the v1 freezer "
        "controller or use cgroup v2 to pause sandboxes"));
  }
  for (const std::string& dir : targets) {
    if (use_v1) {
      RETURN_IF_ERROR(cgroupfs::WriteFile(dir + "/freezer.state", frozen ? "FROZEN" : "THAWED"));
    } else {
      RETURN_IF_ERROR(cgroupfs::WriteFile(dir + "/cgroup.freeze", frozen ? "1" : "0"));
    }
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& dir : targets) {
    const std::string path = dir + (use_v1 ? "/freezer.state" : "/cgroup.events");
    while (!Done(path, use_v1, frozen)) {
      if (absl::Now() >= deadline) {
        return absl::UnavailableError(absl::StrCat("\"", path, "\" did not say ",
                                                   frozen ? "frozen" : "thawed", " within ",
                                                   absl::FormatDuration(timeout), "; retry"));
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  return absl::OkStatus();
}

}  // namespace moat::agent
