// Filesystem and process helpers shared by the cgroup v1 and v2 implementations: reading and
// writing control files with errors that name the file, creating and removing cgroup
// directories, and killing everything in a cgroup.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace moat::sandbox::cgroupfs {

// Every sandbox cgroup lives in `<hierarchy>/moat/<name>`.
inline constexpr char kMoatDir[] = "moat";

// Appended to permission errors.
// (Sandboxes live at the top of each hierarchy, so a cgroup delegated to a user would not help:
// running unprivileged is not supported yet.)
inline constexpr char kPermissionAdvice[] =
    "run moat as root: sandbox cgroups are created under <hierarchy>/moat, and moat does not yet "
    "support running in a cgroup delegated to an unprivileged user";

// CPU quota: the period both versions use, and the quota for `cpus` cores within it.
inline constexpr uint64_t kCpuPeriodUs = 100000;
uint64_t CpuQuotaUs(double cpus);

bool Exists(const std::string& path);

// Whole-file read and write. Writes are a single write(2), as cgroup files require.
absl::StatusOr<std::string> ReadFile(const std::string& path);
absl::Status WriteFile(const std::string& path, absl::string_view value);

// Reads a small file from offset 0 of an open descriptor: cgroup files regenerate their content
// on every read at offset 0, so a kept descriptor saves the open/close of each poll.
absl::StatusOr<std::string> PreadFile(int fd, const std::string& path_for_errors);

// Parses a decimal count, ignoring surrounding whitespace. `path` only names the source.
absl::StatusOr<uint64_t> ParseCount(absl::string_view text, const std::string& path);

// The value of `key` in a flat-keyed file ("key value" per line: cpu.stat, memory.events,
// memory.oom_control). NotFound if the key is absent.
absl::StatusOr<uint64_t> KeyedValue(absl::string_view text, absl::string_view key,
                                    const std::string& path);

// mkdir; returns true if it created the directory, false if it already existed. Permission
// errors carry kPermissionAdvice.
absl::StatusOr<bool> MakeDir(const std::string& path);

// The processes listed in `dir`/cgroup.procs and in those of its sub-cgroups. A missing
// directory is empty.
absl::StatusOr<std::vector<pid_t>> ListProcesses(const std::string& dir);

// Sends SIGKILL to each pid that is still listed in one of `dirs` once we hold a pidfd for it,
// so a pid that was reused by a process outside the cgroup is never signalled.
absl::Status KillListed(const std::vector<pid_t>& pids, const std::vector<std::string>& dirs);

// Polls until no process is listed in `dirs` (true) or `deadline` passes (false).
absl::StatusOr<bool> WaitUntilEmpty(const std::vector<std::string>& dirs, absl::Time deadline);

// How KillUntilEmpty stops forks while it kills; either may be empty (then that step is skipped).
struct FreezeOps {
  std::function<absl::Status()> freeze;  // returns once frozen (or gave up waiting)
  std::function<absl::Status()> thaw;
};

// Repeats freeze, SIGKILL everything listed in `dirs`, thaw, wait; until empty or `timeout`.
// Frozen tasks cannot fork or exit, so the pids read while frozen are exact.
absl::Status KillUntilEmpty(const std::vector<std::string>& dirs, const FreezeOps& ops,
                            absl::Duration timeout);

// Removes `dir` and its sub-cgroups, deepest first. A missing directory is fine. EBUSY (tasks
// still leaving, or a memory cgroup still going offline) is retried until `busy_timeout`.
absl::Status RemoveTree(const std::string& dir, absl::Duration busy_timeout);

// Default time budgets: KillAll and the EBUSY retries of rmdir.
inline constexpr absl::Duration kKillTimeout = absl::Seconds(5);
inline constexpr absl::Duration kRemoveTimeout = absl::Seconds(2);

// The value of `key` in a keyed file such as pids.events; 0 if the file or the key is missing
// (older kernels have neither).
absl::StatusOr<uint64_t> OptionalKeyedValue(const std::string& path, absl::string_view key);

}  // namespace moat::sandbox::cgroupfs
