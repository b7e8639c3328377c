// A sandbox cgroup in the cgroup2 (unified) hierarchy: one directory, `<mount>/moat/<name>`.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/cgroup/cgroup.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

class CgroupV2 final : public Cgroup {
 public:
  // Creates `<mount>/moat/<name>` (`mount` is the layout's v2_parent), enabling `controllers` (a
  // subset of cpu, memory, pids) in the cgroup.subtree_control of `<mount>` and `<mount>/moat`
  // where not yet enabled, and writes the limits of those controllers: cpu.max, memory.max (+
  // memory.swap.max=0 when present), pids.max. CPU time comes from cpu.stat, which v2 keeps even
  // without the cpu controller.
  static absl::StatusOr<std::unique_ptr<CgroupV2>> Create(const std::string& mount,
                                                          const std::set<std::string>& controllers,
                                                          const std::string& name,
                                                          const CgroupLimits& limits);
  ~CgroupV2() override;

  // Skips the migration when /proc/<pid>/cgroup shows the process already in the leaf (cloned
  // with CLONE_INTO_CGROUP).
  absl::Status AddProcess(pid_t pid) override;
  int clone_into_fd() const override { return dir_fd_.get(); }
  absl::StatusOr<uint64_t> ReadCpuNs() override;
  // memory_peak_bytes and oom_kills stay 0 unless the memory controller is enabled here.
  absl::StatusOr<CgroupUsage> ReadUsage() override;
  // cgroup.kill (Linux 5.14+) when present, else cgroup.freeze + SIGKILL + thaw.
  absl::Status KillAll() override;
  absl::Status Destroy() override;
  // cgroup2 cannot rename a cgroup, so there are no v2 spares: the same as Destroy.
  absl::Status Recycle() override { return Destroy(); }
  std::vector<std::string> paths() const override { return {dir_}; }

 private:
  CgroupV2(std::string dir, std::string name, std::set<std::string> controllers)
      : dir_(std::move(dir)), name_(std::move(name)), controllers_(std::move(controllers)) {}

  absl::Status WriteLimits(const CgroupLimits& limits);
  absl::Status OpenFiles();
  absl::Status Freeze(bool frozen);

  const std::string dir_;
  const std::string name_;
  const std::set<std::string> controllers_;
  UniqueFd dir_fd_;        // for CLONE_INTO_CGROUP
  UniqueFd cpu_stat_fd_;   // kept open: ReadCpuNs is polled
  std::string peak_file_;  // memory.peak (Linux 5.19+) or memory.current; "" without memory
  bool destroyed_ = false;
};

// Where CgroupV2::Create moves its own process when the cgroup it was given (a delegated unit's)
// holds it: `<mount>/moat-supervisor`, beside `<mount>/moat`.
inline constexpr char kSupervisorDir[] = "moat-supervisor";

// Enables `controllers` in `dir`/cgroup.subtree_control, writing only those not yet enabled.
absl::Status EnableSubtreeControllers(const std::string& dir,
                                      const std::set<std::string>& controllers);

}  // namespace moat::sandbox
