// User namespace: uid/gid 0 inside maps to one unprivileged host id, never to host root.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moat::sandbox {

// The ids that root inside the sandbox maps to. Root on the host maps the sandbox to `nobody`
// (65534); an unprivileged user maps it to themselves (the only id they may map).
struct IdMapping {
  uid_t host_uid = 65534;
  gid_t host_gid = 65534;
  bool privileged = false;  // the supervisor has CAP_SETUID/CAP_SETGID on the host
};

// Chooses the mapping for the current process. Refuses to map to host root.
absl::StatusOr<IdMapping> DefaultIdMapping();

// Parent side: writes uid_map, setgroups and gid_map of the child `pid`.
absl::Status WriteIdMaps(pid_t pid, const IdMapping& mapping);

// Writes one-id maps for the user namespace of `pid`: `inside_uid`/`inside_gid` there are
// `host_uid`/`host_gid` outside. `deny_setgroups` writes "deny" to setgroups first (required
// without CAP_SETGID on the host). WriteIdMaps and idmapped mounts (idmap.h) both use it.
absl::Status WriteOneIdMaps(pid_t pid, uid_t inside_uid, gid_t inside_gid, uid_t host_uid,
                            gid_t host_gid, bool deny_setgroups);

// Child side, async-signal-safe: after the maps are written, become uid/gid 0 of the namespace
// (which is `mapping.host_uid` on the host) and drop the supplementary groups inherited from the
// supervisor. Returns false after reporting to `error_fd`.
bool BecomeNamespaceRoot(bool privileged, int error_fd);

}  // namespace moat::sandbox
