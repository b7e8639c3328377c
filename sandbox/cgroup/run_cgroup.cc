#include "sandbox/cgroup/run_cgroup.h"

#include "util/status_macros.h"

namespace moat::sandbox {

RunCgroup::RunCgroup(const CgroupLayout& layout, std::string name, CgroupLimits limits)
    : layout_(layout), name_(std::move(name)), limits_(limits) {}

absl::StatusOr<std::unique_ptr<RunCgroup>> RunCgroup::Start(const CgroupLayout& layout,
                                                            std::string name, CgroupLimits limits,
                                                            const std::string& proc_self_cgroup) {
  std::unique_ptr<RunCgroup> run(new RunCgroup(layout, std::move(name), limits));
  if (layout.kind == CgroupLayout::Kind::kV2) {
    ASSIGN_OR_RETURN(run->cgroup_, Cgroup::Create(layout, run->name_, run->limits_));
  } else {
    RunCgroup* self = run.get();
    run->prewarm_ = CgroupPrewarm::Start(layout, proc_self_cgroup, [self] {
      if (!self->claimed_.exchange(true)) {
        self->made_ahead_ = Cgroup::Create(self->layout_, self->name_, self->limits_);
      }
    });
  }
  return run;
}

RunCgroup::~RunCgroup() {
  prewarm_.reset();
  if (cgroup_) cgroup_->Recycle().IgnoreError();
}

absl::StatusOr<Cgroup*> RunCgroup::Get() {
  if (cgroup_) return cgroup_.get();
  if (prewarm_ && claimed_.exchange(true)) {
    prewarm_->Wait();
    ASSIGN_OR_RETURN(cgroup_, std::move(made_ahead_));
  } else {
    ASSIGN_OR_RETURN(cgroup_, Cgroup::Create(layout_, name_, limits_));
  }
  return cgroup_.get();
}

}  // namespace moat::sandbox
