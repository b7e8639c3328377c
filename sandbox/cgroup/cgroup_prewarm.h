// Overlaps the one slow step of cgroup v1 setup with the rest of it.
//
// Moving a process between cgroups takes the kernel's cgroup_threadgroup_rwsem for writing, and
// the first writer after a quiet period waits for an RCU grace period (~6 ms here). Writers that
// follow within about one grace period pass straight through. So, as soon as moat starts, a
// thread re-writes its own id into the cgroup it is already in: a no-op move that pays the grace
// period while the main thread parses the policy, plans mounts and clones. When the sandbox is
// then attached to its own cgroup, the lock is already warm. cgroup v2 needs none of this:
// clone3(CLONE_INTO_CGROUP) creates the process in place.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "sandbox/cgroup/cgroup.h"
#include "util/side_thread.h"

namespace moat::sandbox {

class CgroupPrewarm {
 public:
  // Starts the warm-up if `layout` moves processes through cgroup v1; otherwise does nothing.
  // `then` runs on the thread right after the warm-up: cgroup work that would otherwise wait
  // behind it anyway (the grace period is waited for with the cgroup mutex held), such as
  // making the sandbox's cgroup.
  static std::unique_ptr<CgroupPrewarm> Start(
      const CgroupLayout& layout, const std::string& proc_self_cgroup = "/proc/self/cgroup",
      std::function<void()> then = nullptr);
  ~CgroupPrewarm();  // joins the thread

  // Waits for the warm-up and `then`.
  void Wait();

  CgroupPrewarm(const CgroupPrewarm&) = delete;
  CgroupPrewarm& operator=(const CgroupPrewarm&) = delete;

  // The `tasks` file the warm-up writes to ("" if none).
  const std::string& tasks_file() const { return tasks_file_; }

 private:
  CgroupPrewarm(std::string tasks_file, std::function<void()> then);
  std::string tasks_file_;
  std::unique_ptr<SideThread> thread_;  // on another CPU than the caller's (side_thread.h)
};

}  // namespace moat::sandbox
