// One cgroup per sandbox: limits on CPU, memory and pids, and the usage moat reports.
//
// Three layouts exist in the wild and moat supports all of them:
//   v2      /sys/fs/cgroup is cgroup2 (most current distributions).
//   v1      one cgroup (v1) mount per controller or group of controllers.
//   hybrid  v1 controller mounts plus a cgroup2 mount (often /sys/fs/cgroup/unified) that may
//           offer no controllers at all. crun refuses this layout; moat picks, per controller,
//           the hierarchy that actually offers it (PlanCgroup).
//
// Each sandbox lives in `<hierarchy>/moat/<name>` in every hierarchy it uses. In the cgroup2
// hierarchy `<hierarchy>` is the layout's v2_parent: the v2 mount itself, or, on a host where
// systemd manages cgroup v2, the cgroup systemd delegated to moat (ChooseV2Parent;
// docs/operations.md has the layouts and how to delegate). Names that start
// with the creating process's pid (`<pid>-<suffix>`) let CleanupStaleCgroups find what a crashed
// run left behind. On v1, finished sandboxes' empty directories are kept as spares
// (`<hierarchy>/moat/spare-<k>`, cgroup_spares.h) and the next Create claims them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::sandbox {

struct CgroupLayout {
  enum class Kind { kV1, kV2, kHybrid } kind;
  std::string v2_mount;                          // "" if none
  std::map<std::string, std::string> v1_mounts;  // controller -> mount point
  // The cgroup2 directory that holds moat's `moat/` directory: v2_mount, or a delegated cgroup
  // below it (ChooseV2Parent). "" if there is no cgroup2 mount.
  std::string v2_parent;
  // Controllers v2_parent offers (its cgroup.controllers), read once at detection.
  std::set<std::string> v2_controllers;
  // The mount point of every v1 hierarchy, once each: those of the controllers above and also
  // those moat uses no controller of (devices, net_cls, ...) and named ones (name=systemd). A
  // process is in some cgroup of each (cgroup_detach.h).
  std::set<std::string> v1_hierarchies;

  // E.g. "hybrid (v1: cpu,memory,pids; v2: /sys/fs/cgroup/unified)".
  std::string Describe() const;
};

// Parses the text of /proc/<pid>/mountinfo. Pure: reads no files, so v2_controllers is empty.
// Mounts hidden by a later mount on the same or a parent directory are ignored.
absl::StatusOr<CgroupLayout> ParseCgroupMountinfo(absl::string_view mountinfo);

// What decides where moat's cgroup2 directory goes.
struct V2Placement {
  std::string requested;       // $MOAT_CGROUP_PARENT: a cgroup path such as "/moat.slice"; or ""
  bool systemd = false;        // systemd is the init system (/run/systemd/system exists)
  std::string own_cgroup;      // this process's cgroup2 path ("0::<path>" in /proc/self/cgroup)
  bool own_delegated = false;  // systemd delegated it (xattr trusted.delegate or user.delegate)
};

// The directory under `v2_mount` that gets moat's `moat/`: the requested cgroup when one is
// given; the process's own cgroup when systemd delegated it (a `Delegate=yes` service or
// scope); else the mount itself, as on hosts without systemd. Pure. Errors: a requested path
// that is not absolute or has "." or ".." components.
absl::StatusOr<std::string> ChooseV2Parent(const std::string& v2_mount,
                                           const V2Placement& placement);

// Reads $MOAT_CGROUP_PARENT, /run/systemd/system, /proc/self/cgroup and the delegation xattrs.
V2Placement ReadV2Placement(const std::string& v2_mount);

// Reads mountinfo (path injectable for tests) once, picks v2_parent (ChooseV2Parent with
// ReadV2Placement) and reads its cgroup.controllers.
absl::StatusOr<CgroupLayout> DetectCgroupLayout(
    const std::string& mountinfo_path = "/proc/self/mountinfo");

// Which hierarchy serves each need of a sandbox cgroup. Computed from the layout alone.
struct CgroupPlan {
  // v1 controllers used, controller -> mount point: a subset of cpu, cpuacct, memory, pids,
  // freezer. Controllers co-mounted in one hierarchy share its mount point.
  std::map<std::string, std::string> v1;
  // The layout's v2_parent, when it serves a controller or the CPU time (cpu.stat); else "".
  std::string v2_mount;
  // Controllers to enable on v2: a subset of cpu, memory, pids.
  std::set<std::string> v2_controllers;

  bool uses_v1() const { return !v1.empty(); }
  bool uses_v2() const { return !v2_mount.empty(); }
};

// Picks, for cpu, memory and pids, the v1 hierarchy that has it or else the cgroup2 mount if
// it offers it; CPU time comes from v1 cpuacct or v2 cpu.stat; the v1 freezer is used when
// present. Errors name the missing controller and say what to do.
absl::StatusOr<CgroupPlan> PlanCgroup(const CgroupLayout& layout);

struct CgroupLimits {
  uint64_t memory_bytes;  // > 0
  uint64_t pids;          // > 0
  double cpus;            // in cores, >= 0.01 (the kernel's minimum quota is 1 ms per 100 ms)
};

struct CgroupUsage {
  uint64_t cpu_ns = 0;
  uint64_t memory_peak_bytes = 0;
  uint64_t oom_kills = 0;
  uint64_t pids_limit_hits = 0;  // forks refused at pids.max ("max" in pids.events)
};

// Checks limits and the cgroup name (letters, digits, '.', '_', '-'; not "." or "..").
absl::Status ValidateCgroupRequest(const std::string& name, const CgroupLimits& limits);

// A sandbox's cgroup. ReadCpuNs and ReadUsage may run concurrently with each other (e.g. from a
// monitor thread); the other methods must not race with any call.
class Cgroup {
 public:
  virtual ~Cgroup() = default;

  // Creates <hierarchy>/moat/<name> in every hierarchy needed and writes the limits. In a v1
  // hierarchy a spare is claimed (renamed to <name>) when there is one; what its earlier runs
  // left in the counters is reset or subtracted, so ReadUsage reports this cgroup's runs only.
  // An existing empty leaf of that name (left by a crash) is reused; one with processes is an
  // error.
  static absl::StatusOr<std::unique_ptr<Cgroup>> Create(const CgroupLayout& layout,
                                                        const std::string& name,
                                                        const CgroupLimits& limits);

  // Moves `pid` (its whole thread group) into the cgroup in every hierarchy. Unneeded, and a
  // cheap no-op (~30 us), for a child cloned with CLONE_INTO_CGROUP into clone_into_fd().
  // Writing cgroup.procs takes the kernel's global threadgroup rwsem for writing, which first
  // waits an RCU grace period unless another migration ended within the last one: measured on
  // the dev VM (Linux 6.18, v1), 11 ms median (5-16 ms) cold, 0.07 ms warm. Overlap it with
  // other work (the spawner does, with the child's mount setup).
  virtual absl::Status AddProcess(pid_t pid) = 0;

  // An O_DIRECTORY fd of the v2 leaf for clone3(CLONE_INTO_CGROUP), or -1 when the cgroup also
  // spans v1 hierarchies (then the child must be moved with AddProcess). Owned by the cgroup.
  virtual int clone_into_fd() const = 0;

  virtual absl::StatusOr<uint64_t> ReadCpuNs() = 0;  // cheap (one pread); called repeatedly
  virtual absl::StatusOr<CgroupUsage> ReadUsage() = 0;

  // Kills every process in the cgroup and waits until it is empty.
  virtual absl::Status KillAll() = 0;

  // KillAll, then removes every directory the cgroup owns. Idempotent; the destructor does it if
  // the caller did not.
  virtual absl::Status Destroy() = 0;

  // Like Destroy, but keeps v1 directories as spares for a later Create (cgroup_spares.h) while
  // the pool has room; the rest is removed. The cgroup is unusable afterwards, as after Destroy.
  virtual absl::Status Recycle() = 0;

  virtual std::vector<std::string> paths() const = 0;  // directories it owns
};

// The cgroup directories directly under `<hierarchy>/moat/` in each hierarchy of `layout` (each
// v1 mount and the v2 parent) whose name `keep` accepts: name -> its directory in each
// hierarchy that has it. A hierarchy without moat/ has nothing.
std::map<std::string, std::vector<std::string>> MoatCgroupsByName(
    const CgroupLayout& layout, const std::function<bool(absl::string_view name)>& keep);

// Removes cgroups under `<hierarchy>/moat/` whose name encodes a pid (`<pid>-<suffix>`) that no
// longer exists (a crashed run), killing what is inside first, and spares beyond the pool's
// size (`spare-<k>` with k >= kSpareCgroups). Returns the removed directories.
absl::StatusOr<std::vector<std::string>> CleanupStaleCgroups(const CgroupLayout& layout);

}  // namespace moat::sandbox
