// Watches a sandbox's mount table from outside: the table of its init (/proc/PID/mountinfo, the
// whole mount namespace) is read at start and compared at every tick. Nothing may appear,
// disappear or change: a new mount is how host files would get in, and a remount (say, rw) or
// an unmount would undo the sandbox's view.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::agent::probe {

struct MountChange {
  enum class Kind { kAppeared, kDisappeared, kChanged };
  Kind kind;
  std::string before;  // the mountinfo line before ("" if it appeared)
  std::string after;   // and now ("" if it disappeared)

  // E.g. "appeared: 812 790 0:61 / /tmp rw,relatime - tmpfs tmpfs rw".
  std::string Describe() const;
};

// Mount id (mountinfo's first field) -> the whole line.
using MountTable = std::map<std::string, std::string>;

MountTable ParseMountTable(absl::string_view mountinfo);

// What differs from `before` to `after`, in mount-id order. A line whose only difference is that
// its root gained "//deleted" is no change: the host unlinked the source of a bind mount (a
// restarted agent's old pod's /etc/hosts, say), which the sandbox cannot do, and the mount itself
// is as it was.
std::vector<MountChange> DiffMountTables(const MountTable& before, const MountTable& after);

class MountWatch {
 public:
  // Reads the baseline from /proc/<pid>/mountinfo (path injectable for tests).
  static absl::StatusOr<MountWatch> Start(const std::string& mountinfo_path);

  // Reads the table again; returns the changes since the last call and makes the current table
  // the new baseline, so each change is reported once.
  absl::StatusOr<std::vector<MountChange>> Check();

 private:
  MountWatch(std::string path, MountTable table)
      : path_(std::move(path)), table_(std::move(table)) {}

  std::string path_;
  MountTable table_;
};

}  // namespace moat::agent::probe
