// The mount namespace that crun runs in during the benchmark, prepared once before any timing.
//
// Two things need it. crun 1.8.1 refuses a hybrid cgroup layout (v1 controllers plus a cgroup2
// hierarchy at /sys/fs/cgroup/unified) when that cgroup2 hierarchy has any controller, and it
// does so before it looks at --cgroup-manager, so no flag helps (`--cgroup-manager=disabled`
// fails the same way). Hiding the cgroup2 mount from crun makes it see plain cgroup v1, which it
// supports. And crun's pivot_root needs the rootfs to be a mount other than the current root, so
// the host root is bound (recursively, read-only) at the bundle's rootfs directory.
//
// Both changes live in a private mount namespace; the bench and every other runner keep the
// host's view. The namespace lives as long as its fd.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "util/unique_fd.h"

namespace moat::bench {

enum class CgroupLayout {
  kUnified,  // cgroup2 at /sys/fs/cgroup
  kLegacy,   // only v1 hierarchies under a tmpfs at /sys/fs/cgroup
  kHybrid,   // v1 hierarchies plus cgroup2 at /sys/fs/cgroup/unified
};

struct CgroupHost {
  CgroupLayout layout = CgroupLayout::kLegacy;
  std::string unified_controllers;  // kHybrid: the cgroup2 hierarchy's controllers, trimmed
};

// Reads the layout the way crun does: statfs of `root` and of `root`/unified.
absl::StatusOr<CgroupHost> DetectCgroupHost(const std::string& root = "/sys/fs/cgroup");

// Whether crun 1.8.1 refuses to run any container on this host.
bool CrunRefusesCgroups(const CgroupHost& host);

struct CrunView {
  UniqueFd mount_ns;               // pass as RunSpec::mount_ns_fd
  std::vector<std::string> notes;  // what was changed in crun's view, for the report
};

// Makes crun's mount namespace: a private copy of the caller's, the host root bound read-only
// (recursively) on `rootfs_dir` (an existing, empty directory: the bundle's rootfs), and, when
// CrunRefusesCgroups, without the mount at /sys/fs/cgroup/unified. The caller must be root and
// single-threaded; it is back in its own mount namespace and working directory on return.
absl::StatusOr<CrunView> PrepareCrunView(const std::string& rootfs_dir);

}  // namespace moat::bench
