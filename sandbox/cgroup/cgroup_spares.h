// Spare sandbox cgroups (cgroup v1): the empty cgroup of a finished sandbox is kept for the next.
//
// Why: a fresh v1 cgroup costs a mkdir in each hierarchy and an rmdir after the run (~0.3 ms in
// all for four hierarchies here). Worse, a memory cgroup's mkdir allocates per-CPU state under
// the kernel's per-CPU allocator lock, which the sandbox's first tmpfs mount also needs: run
// side by side, as they are (spawn.h), the child's mounts waited ~0.2 ms for it.
//
// How: in each hierarchy the spares are siblings of the sandboxes, `<hierarchy>/moat/spare-<k>`
// with k < kSpareCgroups (cgroup v1 renames only within one parent; cgroup2 cannot rename at
// all, so v2 cgroups are never kept). A run claims a spare by renaming it to its own name and
// gives it back by renaming it to a free spare name. rename(2) is atomic and cgroupfs refuses an
// existing target (EEXIST), so two moat processes never get the same spare: of two renames of
// one spare, the second fails with ENOENT and tries the next. Hierarchies are independent: a
// sandbox may hold spare-0 in one and spare-3 in another.
//
// A spare is empty (no process, no sub-cgroup) when it is given back. What it keeps from earlier
// runs (counters that cannot be reset, page cache still charged to it) is the claiming cgroup's
// concern (CgroupV1: counters reset or read as a baseline when claimed).
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace moat::sandbox::cgroupfs {

// Spares per hierarchy. Beyond it a finished sandbox's cgroup is removed as before.
inline constexpr int kSpareCgroups = 8;
inline constexpr char kSparePrefix[] = "spare-";

// The k of "spare-<k>" for any k >= 0 (so that cleanup can trim spares out of range), or
// nullopt when `name` is not a spare's name.
std::optional<int> SpareIndex(absl::string_view name);

// Renames a spare in `parent` (a `<hierarchy>/moat` directory) to `parent`/`name`. False when no
// spare could be claimed: none left, `name` exists already, or any error (the caller then creates
// the cgroup as usual, and that reports real problems).
bool ClaimSpareCgroup(const std::string& parent, const std::string& name);

// Renames the cgroup directory `dir` to a free spare name beside it. False when every spare name
// is taken or the rename fails; the directory is then unchanged and the caller removes it. The
// caller must have checked that it is empty.
bool ReturnSpareCgroup(const std::string& dir);

// True if the cgroup directory `dir` has no sub-cgroups: its link count is 2 on cgroupfs (and on
// ordinary file systems) when no directory is below it.
bool HasNoSubCgroups(const std::string& dir);

}  // namespace moat::sandbox::cgroupfs
