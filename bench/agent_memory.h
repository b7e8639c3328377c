// Parsers for the memory figures of agent_bench: /proc files, the memory cgroup's mount, the
// agent's /metrics. Kept apart from the bench so that each can be tested on text.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::bench {

// The value of a "Name:   123 kB" line (as in /proc/PID/status and smaps_rollup), in bytes.
absl::StatusOr<uint64_t> KbFieldBytes(absl::string_view text, absl::string_view name);

// Where memory is accounted: a v1 hierarchy with the memory controller, or the cgroup2 mount.
struct MemoryCgroupMount {
  std::string path;  // e.g. /sys/fs/cgroup/memory
  bool v2 = false;   // memory.current (v2) rather than memory.usage_in_bytes (v1)
  // The file with a cgroup's charge, relative to the cgroup's directory.
  std::string ChargeFile() const { return v2 ? "memory.current" : "memory.usage_in_bytes"; }
};

// From /proc/self/mounts text: the v1 hierarchy with the memory controller if there is one
// (on a hybrid host memory is v1's), else the first cgroup2 mount, else nullopt.
std::optional<MemoryCgroupMount> FindMemoryCgroupMount(absl::string_view mounts);

// From /proc/PID/cgroup text: the path of the process's cgroup in the hierarchy with
// `controller` ("memory" for v1; "" for the cgroup2 line "0::/path"); nullopt if none.
std::optional<std::string> CgroupPathOf(absl::string_view proc_cgroup,
                                        absl::string_view controller);

// From /proc/PID/stat text: the command name (without parentheses) and the parent pid.
struct ProcStat {
  std::string comm;
  pid_t ppid = 0;
};
absl::StatusOr<ProcStat> ParseProcStat(absl::string_view stat);

// The value of a "key value" line (as in memory.stat); nullopt if absent or not a number.
std::optional<uint64_t> KeyValue(absl::string_view text, absl::string_view key);

// The value of the Prometheus sample `series` (name and labels exactly as printed, e.g.
// moat_pool_depth{profile="default"}) in a text exposition; nullopt if absent.
std::optional<double> MetricValue(absl::string_view exposition, absl::string_view series);

}  // namespace moat::bench
