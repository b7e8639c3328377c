// A helper thread that starts on another CPU than the thread creating it, when one looks idle.
//
// Why: the runtime starts short helper threads (the network namespace, the cgroup v1 warm-up) to
// overlap slow kernel work with the main thread's own. Measured here (2 vCPUs, Linux 6.18), a
// process's new thread is usually placed on its creator's CPU and runs first: std::thread's
// constructor then returned only once the new thread blocked or ended (0.59 ms for a network
// namespace), so nothing overlapped. Created with an affinity that leaves out the creator's CPU,
// the thread starts on another one (the constructor returns in ~0.09 ms) and both run at once.
// Once running, the thread takes back the process's whole CPU set, so it is never stuck behind
// a busy CPU while another is free.
//
// But a thread pinned away from its creator before it first runs cannot be moved: when the other
// CPUs are busy (measured with one CPU-bound process beside moat), it waits behind them while its
// creator's CPU may idle, and a sandbox started 0.5-1.8 ms later (medians) than with a plain
// thread. So by default (Placement::kAuto) it is pinned only when fewer tasks are runnable on the
// machine than the process has CPUs (/proc/loadavg; the creator is one of them), i.e. when some
// other CPU is likely idle; otherwise it is a plain thread, which the scheduler places and moves
// freely.
//
// With one usable CPU, or if the affinity cannot be set, the thread is created as usual. If no
// thread can be created at all (a process or thread limit), `body` does not run: started() says
// so, and the caller does the work itself or goes without. (Running it inline instead would
// deadlock a body that waits for its creator.)
#pragma once

#include <pthread.h>
#include <sched.h>

#include <functional>

namespace moat {

enum class Placement {
  kAuto,             // away from the creator's CPU when another CPU looks idle
  kAwayFromCreator,  // away from the creator's CPU whenever the process has another
  kAnywhere,         // where the scheduler puts it
};

// How many tasks are runnable now, from /proc/loadavg's "<runnable>/<total>" field; -1 if it
// cannot be read.
int RunnableTasks(const char* loadavg_path = "/proc/loadavg");

class SideThread {
 public:
  explicit SideThread(std::function<void()> body, Placement placement = Placement::kAuto);
  ~SideThread();  // joins

  SideThread(const SideThread&) = delete;
  SideThread& operator=(const SideThread&) = delete;

  // Whether the thread exists: false if it could not be created, and `body` will never run.
  bool started() const { return started_; }

  // Waits for `body` to return. Idempotent; nothing to wait for if the thread never started.
  void Join();

  // The CPU left out at creation (the creator's), or -1 if none was.
  int avoided_cpu() const { return avoided_cpu_; }
  // The CPU `body`'s thread began on, before it widened its affinity; valid after Join().
  int started_on() const { return started_on_; }

 private:
  static void* Start(void* self);

  std::function<void()> body_;
  cpu_set_t all_cpus_;  // the process's set, restored by the thread when it starts
  bool restore_affinity_ = false;
  int avoided_cpu_ = -1;
  int started_on_ = -1;
  pthread_t thread_{};
  bool started_ = false;
  bool joinable_ = false;
};

}  // namespace moat
