// The cgroup of one `moat run`, made where it costs least. On cgroup v2 it is made at once: the
// child is cloned into it. On v1 the warm-up thread (cgroup_prewarm.h) makes it right after
// paying the grace period it holds the cgroup mutex through, so the main thread waits for
// nobody; if the main thread needs it first (a busy machine may not have run the thread yet),
// it makes it itself. Whoever comes first makes it; the other never does.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/cgroup/cgroup_prewarm.h"

namespace moat::sandbox {

class RunCgroup {
 public:
  // `proc_self_cgroup` is where the warm-up finds the cgroup it rewrites itself into (tests).
  static absl::StatusOr<std::unique_ptr<RunCgroup>> Start(
      const CgroupLayout& layout, std::string name, CgroupLimits limits,
      const std::string& proc_self_cgroup = "/proc/self/cgroup");
  // Joins the warm-up; the cgroup is recycled (on v1 its empty directory is kept for the next
  // run: cgroup_spares.h) or, if it was made and never taken, removed.
  ~RunCgroup();
  RunCgroup(const RunCgroup&) = delete;
  RunCgroup& operator=(const RunCgroup&) = delete;

  // The cgroup if it exists already (always on v2): clone3 can create the child in it.
  Cgroup* made() const { return cgroup_.get(); }
  // The cgroup, waiting for the warm-up's or making it now.
  absl::StatusOr<Cgroup*> Get();

 private:
  RunCgroup(const CgroupLayout& layout, std::string name, CgroupLimits limits);

  const CgroupLayout& layout_;
  const std::string name_;
  const CgroupLimits limits_;
  std::unique_ptr<Cgroup> cgroup_;
  // Written by the warm-up's thread, read after its Wait().
  std::atomic<bool> claimed_{false};
  absl::StatusOr<std::unique_ptr<Cgroup>> made_ahead_ = absl::UnknownError("no cgroup made ahead");
  std::unique_ptr<CgroupPrewarm> prewarm_;  // Last: joined before the fields it writes go.
};

}  // namespace moat::sandbox
