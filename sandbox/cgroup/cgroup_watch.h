// A cgroup's figures now, read straight from its control files by whoever did not make it (the
// probe) or only needs a look (the agent's health and usage figures, a sandbox's teardown): the
// one reader of processes, tasks, memory, CPU and OOM kills for v1, v2 and hybrid layouts, and a
// kill of everything in it. Works on one cgroup2 directory or on one directory per v1 hierarchy;
// each figure comes from whichever directory has its file. The files are opened once, so a
// watcher re-reads them cheaply.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

struct CgroupSample {
  int processes = 0;                     // listed in cgroup.procs (sub-cgroups included)
  std::optional<uint64_t> tasks;         // pids.current: threads count against pids.max
  std::optional<uint64_t> memory_bytes;  // memory.current (v2), memory.usage_in_bytes (v1)
  std::optional<uint64_t> cpu_ns;        // cpu.stat usage_usec (v2), cpuacct.usage (v1)
  // Processes the OOM killer ended at the memory limit, since the cgroup was made:
  // memory.events (v2) or memory.oom_control (v1), "oom_kill N".
  std::optional<uint64_t> oom_kills;
};

class CgroupWatch;
// CgroupWatch::Open(dirs) then Read(): one look.
absl::StatusOr<CgroupSample> ReadCgroupNow(const std::vector<std::string>& dirs);

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

}  // namespace moat::sandbox
