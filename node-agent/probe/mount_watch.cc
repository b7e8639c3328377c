#include "node-agent/probe/mount_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/util/errno_status.h"
#include "sandbox/util/unique_fd.h"

namespace moat::agent::probe {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(absl::StrCat("open \"", path, "\""), errno);
  std::string text;
  char buf[8192];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StrCat("read \"", path, "\""), errno);
    if (n == 0) return text;
    text.append(buf, n);
  }
}

}  // namespace

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
      if (a->second != b->second) {
        changes.push_back({MountChange::Kind::kChanged, b->second, a->second});
      }
      ++a;
      ++b;
    }
  }
  return changes;
}

absl::StatusOr<MountWatch> MountWatch::Start(const std::string& mountinfo_path) {
  absl::StatusOr<std::string> text = ReadWhole(mountinfo_path);
  if (!text.ok()) return text.status();
  return MountWatch(mountinfo_path, ParseMountTable(*text));
}

absl::StatusOr<std::vector<MountChange>> MountWatch::Check() {
  absl::StatusOr<std::string> text = ReadWhole(path_);
  if (!text.ok()) return text.status();
  MountTable now = ParseMountTable(*text);
  std::vector<MountChange> changes = DiffMountTables(table_, now);
  table_ = std::move(now);
  return changes;
}

}  // namespace moat::agent::probe
