// The probe's view of a sandbox's cgroup: usage read straight from the control files (the probe
// did not create the cgroup, so it does not use sandbox::Cgroup), and a kill of everything in it.
// Works on one cgroup2 directory or on one directory per v1 hierarchy; each figure comes from
// whichever directory has its file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/util/unique_fd.h"

namespace moat::agent::probe {

struct CgroupSample {
  int processes = 0;                     // listed in cgroup.procs (sub-cgroups included)
  std::optional<uint64_t> tasks;         // pids.current: threads count against pids.max
  std::optional<uint64_t> memory_bytes;  // memory.current (v2), memory.usage_in_bytes (v1)
  std::optional<uint64_t> cpu_ns;        // cpu.stat usage_usec (v2), cpuacct.usage (v1)
  // Processes the OOM killer ended at the memory limit, since the cgroup was made:
  // memory.events (v2) or memory.oom_control (v1), "oom_kill N".
  std::optional<uint64_t> oom_kills;
};

class CgroupWatch {
 public:
  // Finds the files in `dirs`; a directory that does not exist is an error (the backend passed a
  // wrong path). No dirs: every sample is empty.
  static absl::StatusOr<CgroupWatch> Open(const std::vector<std::string>& dirs);

  absl::StatusOr<CgroupSample> Read() const;

  // cgroup.kill where the kernel has it (v2, Linux 5.14+), else SIGKILL to every listed
  // process through a pidfd (so a reused pid is never hit).
  absl::Status KillAll() const;

 private:
  struct File {
    UniqueFd fd;
    std::string path;
  };

  std::vector<std::string> dirs_;
  std::optional<File> tasks_;
  std::optional<File> memory_;
  std::optional<File> cpu_;
  std::optional<File> oom_;
  bool cpu_is_v2_stat_ = false;  // cpu.stat (microseconds, keyed) rather than cpuacct.usage (ns)
  std::string kill_file_;        // cgroup.kill, or "" without one
};

}  // namespace moat::agent::probe
