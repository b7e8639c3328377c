#include "sandbox/host_setup.h"

#include <utility>

#include "sandbox/caps.h"
#include "util/status_macros.h"

namespace moat::sandbox {

absl::StatusOr<std::unique_ptr<HostSetup>> HostSetup::Detect(const HostSetupOptions& options) {
  ASSIGN_OR_RETURN(CgroupLayout layout, DetectCgroupLayout());
  if (!options.keep_v1_freezer) layout.v1_mounts.erase("freezer");
  RETURN_IF_ERROR(PlanCgroup(layout).status());  // a missing controller fails here, early
  ASSIGN_OR_RETURN(IdMapping ids, DefaultIdMapping());
  return std::unique_ptr<HostSetup>(new HostSetup(std::move(layout), ids, LastCapability()));
}

absl::StatusOr<const SeccompProgram*> HostSetup::Seccomp(bool guard_creation) const {
  absl::MutexLock lock(&mu_);
  std::optional<SeccompProgram>& cached = seccomp_[guard_creation ? 1 : 0];
  if (!cached) {
    SeccompOptions options;
    options.notify_violations = true;
    options.guard_creation = guard_creation;
    absl::StatusOr<SeccompProgram> program = SeccompProgram::Precompiled(options);
    if (!program.ok()) program = SeccompProgram::Build(options);
    ASSIGN_OR_RETURN(cached, std::move(program));
  }
  return &*cached;
}

}  // namespace moat::sandbox
