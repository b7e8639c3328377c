// What every sandbox of this process shares, computed once: the cgroup layout (checked, so a
// missing controller fails at start rather than at the first sandbox), the id mapping, the last
// capability the kernel knows, and the seccomp programs. `moat run`'s Runner and the agent's
// SandboxFactory each hold one; PrepareSandbox (prepare.h) takes it for every sandbox.
#pragma once

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/seccomp/seccomp_filter.h"
#include "sandbox/userns.h"

namespace moat::sandbox {

struct HostSetupOptions {
  // The v1 freezer only keeps KillAll safe from processes forking while they are killed; a
  // sandbox's processes all die with its init (pid namespace) anyway, so `moat run` leaves it out
  // (one hierarchy less to create, join and remove per run). The agent keeps it to pause and
  // resume whole sandboxes. On v2 the freezer is core (cgroup.freeze) either way.
  bool keep_v1_freezer = false;
};

class HostSetup {
 public:
  static absl::StatusOr<std::unique_ptr<HostSetup>> Detect(const HostSetupOptions& options = {});

  const CgroupLayout& cgroup_layout() const { return layout_; }
  const IdMapping& ids() const { return ids_; }
  int last_cap() const { return last_cap_; }

  // The filter, with violations reported to the supervisor, with or without the creation
  // guard's calls (creation_guard.h): the program compiled into moat when it was built, else one
  // built with libseccomp. Built on first use and kept. Thread-safe.
  absl::StatusOr<const SeccompProgram*> Seccomp(bool guard_creation) const;

 private:
  HostSetup(CgroupLayout layout, IdMapping ids, int last_cap)
      : layout_(std::move(layout)), ids_(ids), last_cap_(last_cap) {}

  const CgroupLayout layout_;
  const IdMapping ids_;
  const int last_cap_;
  mutable absl::Mutex mu_;
  // Without, with the creation guard's calls.
  mutable std::optional<SeccompProgram> seccomp_[2] ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::sandbox
