#include "node-agent/probe/mount_watch.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/cgroup/cgroup_fs.h"

namespace moat::agent::probe {

std::string MountChange::Describe() const {
  switch (kind) {
    case Kind::kAppeared:
      return absl::StrCat("appeared: ", after);
    case Kind::kDisappeared:
      return absl::StrCat("disappeared: ", before);
    case Kind::kChanged:
      return absl::StrCat("changed: ", before, " -> ", after);
  }
  return "";
}

MountTable ParseMountTable(absl::string_view mountinfo) {
  MountTable table;
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipEmpty())) {
    const size_t space = line.find(' ');
    table.emplace(std::string(line.substr(0, space)), std::string(line));
  }
  return table;
}

namespace {

// The same line but for the root field (the 4th: mountinfo escapes spaces in paths) having
// gained the kernel's "//deleted" suffix.
bool OnlyItsSourceWasDeleted(absl::string_view before, absl::string_view after) {
  const std::vector<absl::string_view> b = absl::StrSplit(before, ' ');
  const std::vector<absl::string_view> a = absl::StrSplit(after, ' ');
  if (a.size() != b.size() || a.size() < 4) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (i == 3 ? a[i] != absl::StrCat(b[i], "//deleted") : a[i] != b[i]) return false;
  }
  return true;
}

}  // namespace

std::vector<MountChange> DiffMountTables(const MountTable& before, const MountTable& after) {
  std::vector<MountChange> changes;
  auto b = before.begin();
  auto a = after.begin();
  while (b != before.end() || a != after.end()) {
    if (a == after.end() || (b != before.end() && b->first < a->first)) {
      changes.push_back({MountChange::Kind::kDisappeared, b->second, ""});
      ++b;
    } else if (b == before.end() || a->first < b->first) {
      changes.push_back({MountChange::Kind::kAppeared, "", a->second});
      ++a;
    } else {
      if (a->second != b->second && !OnlyItsSourceWasDeleted(b->second, a->second)) {
        changes.push_back({MountChange::Kind::kChanged, b->second, a->second});
      }
      ++a;
      ++b;
    }
  }
  return changes;
}

absl::StatusOr<MountWatch> MountWatch::Start(const std::string& mountinfo_path) {
  absl::StatusOr<std::string> text = sandbox::cgroupfs::ReadFile(mountinfo_path);
  if (!text.ok()) return text.status();
  return MountWatch(mountinfo_path, ParseMountTable(*text));
}

absl::StatusOr<std::vector<MountChange>> MountWatch::Check() {
  absl::StatusOr<std::string> text = sandbox::cgroupfs::ReadFile(path_);
  if (!text.ok()) return text.status();
  MountTable now = ParseMountTable(*text);
  std::vector<MountChange> changes = DiffMountTables(table_, now);
  table_ = std::move(now);
  return changes;
}

}  // namespace moat::agent::probe
