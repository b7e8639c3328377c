// The sandbox's root file system, built by the supervisor before clone3 as one detached mount
// tree, which the child then attaches with a single move_mount.
//
// Why: the child used to build it, ~70 mount steps (a tmpfs root, a bind or symlink per
// top-level host entry, /run, /dev with its devices, /tmp, /workspace), ~0.5 ms on the sandbox's
// critical path. The supervisor can build it meanwhile: its main thread would otherwise wait for
// the network namespace (netns_prep.h). What needs the sandbox's own namespaces stays in the
// child: /proc and its masks (pid namespace), devpts (user namespace), the policy's paths
// (resolved inside the finished root) and pivot_root.
//
// Same view as the child-built one: tmpfs roots owned by the sandbox's root (their uid= and gid=
// options; the child's own mounts were owned by it), symlinks too; the host part read-only,
// nosuid, nodev; /dev read-only with bound null, zero, full, random, urandom (read-only,
// nosuid, noexec) and a writable /dev/shm; writable tmpfs /tmp and /workspace.
//
// Needs Linux 6.15 or later (mounting onto a detached mount tree). Earlier kernels refuse the
// first such mount; BuildRootTree then says so once (Unimplemented) and MountPlan falls back to
// the child-built root.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/util/unique_fd.h"

namespace moat::sandbox {

// /dev: the harmless character devices bound from the host, and the usual links.
inline constexpr std::array<const char*, 5> kDevDevices = {"null", "zero", "full", "random",
                                                           "urandom"};
inline constexpr std::array<std::pair<const char*, const char*>, 5> kDevLinks = {{
    {"fd", "/proc/self/fd"},
    {"stdin", "/proc/self/fd/0"},
    {"stdout", "/proc/self/fd/1"},
    {"stderr", "/proc/self/fd/2"},
    {"ptmx", "pts/ptmx"},
}};

// A top-level entry of the host's root directory as the sandbox shows it.
struct HostEntry {
  enum class Kind { kDirectory, kFile, kSymlink };
  Kind kind;
  std::string name;  // e.g. "usr"
  std::string link;  // kSymlink: its target, recreated as is
};

struct RootTreeSpec {
  std::vector<HostEntry> host_entries;  // bound (recursively) or recreated
  std::string source_root = "/";        // the host directory they are in
  std::vector<std::string> own_dirs;    // empty directories: mount points of the sandbox's own
  uint64_t tmpfs_bytes = 64ull << 20;   // /tmp, /workspace and /dev/shm, each
  bool workspace_tmpfs = true;          // false: /workspace stays a mount point (--workspace)
  uid_t uid = 0;                        // the sandbox's root on the host
  gid_t gid = 0;
};

// "<root>/<name>" for a top-level entry of the host directory `root` ("/" gives "/<name>").
inline std::string JoinUnderRoot(const std::string& root, const std::string& name) {
  return root.empty() || root.back() == '/' ? root + name : root + "/" + name;
}

// Builds the tree. Unimplemented when the kernel cannot mount onto a detached tree (remembered:
// later calls return it at once); other errors name the step.
absl::StatusOr<UniqueFd> BuildRootTree(const RootTreeSpec& spec);

}  // namespace moat::sandbox
