// A sandbox cgroup in cgroup v1 hierarchies: `<mount>/moat/<name>` in each hierarchy used.
// Controllers co-mounted in one hierarchy (e.g. "cpu,cpuacct") share one directory.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/cgroup/cgroup.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

class CgroupV1 final : public Cgroup {
 public:
  // `controllers` maps each controller to use (a subset of cpu, cpuacct, memory, pids, freezer)
  // to its hierarchy's mount point. Claims a spare in each hierarchy that has one
  // (cgroup_spares.h), else creates the directory. Writes cpu.cfs_period_us/cpu.cfs_quota_us,
  // memory.limit_in_bytes (+ memory.memsw.limit_in_bytes when present) and pids.max for the
  // controllers present. In a spare (or a reused leftover) it also resets cpuacct.usage and
  // memory.max_usage_in_bytes, and takes as a baseline what cannot be reset: the memory still
  // charged from earlier runs, the oom_kill count and pids.events' "max".
  static absl::StatusOr<std::unique_ptr<CgroupV1>> Create(
      const std::map<std::string, std::string>& controllers, const std::string& name,
      const CgroupLimits& limits);
  ~CgroupV1() override;

  // One write to cgroup.procs per hierarchy; the first costs an RCU grace period (see cgroup.h).
  absl::Status AddProcess(pid_t pid) override;
  int clone_into_fd() const override { return -1; }  // CLONE_INTO_CGROUP is v2 only
  // From cpuacct.usage; FailedPrecondition without cpuacct.
  absl::StatusOr<uint64_t> ReadCpuNs() override;
  // Fields of controllers not used here stay 0.
  absl::StatusOr<CgroupUsage> ReadUsage() override;
  // Freezer (when used) + SIGKILL everything listed + thaw, until empty.
  absl::Status KillAll() override;
  absl::Status Destroy() override;
  // Directories go back to the spare pool when empty, free of sub-cgroups, and (memory) with at
  // most kMaxSpareCharge bytes still charged; the others are removed.
  absl::Status Recycle() override;
  std::vector<std::string> paths() const override { return dirs_; }

  // A memory cgroup that still has more than this charged (page cache its runs read in) is
  // removed rather than kept: that charge would count against the next run's limit.
  static constexpr uint64_t kMaxSpareCharge = 8 << 20;

  bool has(const std::string& controller) const { return leaf_.contains(controller); }

 private:
  explicit CgroupV1(std::string name) : name_(std::move(name)) {}

  absl::Status WriteLimits(const CgroupLimits& limits, bool reused);
  absl::Status ResetCounters();
  absl::Status SetFreezerState(const std::string& state);
  std::string File(const std::string& controller, const std::string& file) const {
    return leaf_.at(controller) + "/" + file;
  }

  const std::string name_;
  std::map<std::string, std::string> leaf_;  // controller -> its leaf directory
  std::vector<std::string> dirs_;            // distinct leaf directories, in creation order
  UniqueFd cpuacct_usage_fd_;                // kept open: ReadCpuNs is polled
  // What earlier runs of a reused directory left in counters that cannot be reset; ReadUsage
  // subtracts them. 0 for a fresh directory.
  uint64_t memory_base_ = 0;
  uint64_t oom_kills_base_ = 0;
  uint64_t pids_max_base_ = 0;
  bool destroyed_ = false;
};

}  // namespace moat::sandbox
