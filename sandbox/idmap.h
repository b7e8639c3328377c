// Idmapped mounts: a host directory whose owner differs from the sandbox's host uid is shown to
// the sandbox as owned by its root, without changing anything on disk.
//
// Example: `sudo moat run --workspace ./proj`. The sandbox's root is host uid 65534, ./proj is
// owned by uid 1000. A plain bind would leave /workspace read-only in effect. With an idmapped
// bind, files of uid 1000 appear as the sandbox's root, and files the sandbox creates are stored
// as uid 1000, as if the owner had written them.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

// A user namespace mapping `from` (ids on disk) to `to` (ids of the sandbox on the host), held
// open by its fd. Made by a short-lived child that only exists to own it.
absl::StatusOr<UniqueFd> MakeMappingUserNamespace(uid_t from_uid, gid_t from_gid, uid_t to_uid,
                                                  gid_t to_gid);

// Makes the detached tree `tree_fd` (open_tree) nosuid and nodev, and, with a `userns_fd`,
// idmapped through it. Needs CAP_SYS_ADMIN on the host and, for the idmap, a file system that
// supports idmapped mounts (ext4, xfs, btrfs, tmpfs >= 6.3, ...). `path` is for messages.
absl::Status PrepareTree(int tree_fd, int userns_fd, const std::string& path);

}  // namespace moat::sandbox
