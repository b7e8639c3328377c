#include "sandbox/cgroup/cgroup_spares.h"

#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace moat::sandbox::cgroupfs {

std::optional<int> SpareIndex(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kSparePrefix)) return std::nullopt;
  int index = 0;
  // Digits only: SimpleAtoi would also take "+1" or " 1", names moat never makes.
  if (name.empty() || name.size() > 9 ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(name, &index)) {
    return std::nullopt;
  }
  return index;
}

bool ClaimSpareCgroup(const std::string& parent, const std::string& name) {
  const std::string target = absl::StrCat(parent, "/", name);
  for (int k = 0; k < kSpareCgroups; ++k) {
    const std::string spare = absl::StrCat(parent, "/", kSparePrefix, k);
    if (::rename(spare.c_str(), target.c_str()) == 0) return true;
    // ENOENT: that spare is not there (never made, or claimed a moment ago): try the next.
    // Anything else (the target exists, no permission, no such parent) will not change with
    // another spare.
    if (errno != ENOENT) return false;
  }
  return false;
}

bool ReturnSpareCgroup(const std::string& dir) {
  const size_t slash = dir.rfind('/');
  if (slash == std::string::npos) return false;
  const std::string parent = dir.substr(0, slash);
  for (int k = 0; k < kSpareCgroups; ++k) {
    const std::string spare = absl::StrCat(parent, "/", kSparePrefix, k);
    if (::rename(dir.c_str(), spare.c_str()) == 0) return true;
    // cgroupfs refuses an existing target with EEXIST, other file systems (the tests' fake
    // tree) with ENOTEMPTY: that name is taken, try the next.
    if (errno != EEXIST && errno != ENOTEMPTY) return false;
  }
  return false;
}

bool HasNoSubCgroups(const std::string& dir) {
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_nlink == 2;
}

}  // namespace moat::sandbox::cgroupfs
