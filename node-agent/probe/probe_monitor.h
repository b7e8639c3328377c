// The agent's side of the probes (docs/probe.md): one thread, one epoll over the read ends of
// every probe's report pipe (and a pidfd of each probe process). It parses the probes' JSON
// lines, keeps each sandbox's last heartbeat and calls back on events and on missed heartbeats.
//
// The compromise rule, per sandbox, with I = interval, N = misses, g = grace (I/2 by default,
// for a heartbeat that is merely late), t0 = the last heartbeat (or Watch):
//
//   t0 ──── t0+I+g ──── t0+2I+g ──── ... ──── t0+NI+g
//           missed 1    missed 2              missed N: on_compromised, once
//
// A probe that dies, or whose pipe closes, before it said "exited" is compromised at once: the
// sandbox is alive and nobody watches it. After "exited" nothing more is expected.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/clock.h"
#include "util/unique_fd.h"

namespace moat::agent {

struct ProbeEvent {
  enum class Type { kViolation, kNearLimit, kKilled, kExited, kDropped, kError };
  Type type = Type::kError;
  // kViolation: "mount", "syscall"; kNearLimit: "memory", "pids"; kKilled: "cpu", "memory".
  std::string kind;
  std::string detail;  // kViolation, kError: what happened
  double value = 0;    // kNearLimit, kKilled: the figure (bytes, tasks, seconds)...
  double limit = 0;    // ...and its limit
  uint64_t lines = 0;  // kDropped: lines the probe's channel dropped
};

// "violation", "near_limit", "killed", "exited", "dropped", "error".
absl::string_view ProbeEventTypeName(ProbeEvent::Type type);

struct ProbeHeartbeat {
  absl::Time received = absl::InfinitePast();  // by the agent's clock; InfinitePast if none yet
  int processes = 0;
  uint64_t tasks = 0;  // threads counted against pids.max
  uint64_t memory_bytes = 0;
  double cpu_seconds = 0;
};

struct ProbeMonitorOptions {
  absl::Duration interval = absl::Seconds(5);  // the probes' --interval
  int misses = 3;
  absl::Duration grace = absl::InfiniteDuration();  // InfiniteDuration: interval / 2
  size_t max_line_bytes = 64 << 10;                 // longer lines are dropped and counted
  // How often the thread looks at the clock; InfiniteDuration: interval / 10, at most 100 ms.
  absl::Duration tick = absl::InfiniteDuration();
};

// Called on the monitor's thread, never with its lock held: they may call Watch and Forget.
struct ProbeCallbacks {
  std::function<void(const std::string& id, const ProbeEvent& event)> on_event;
  std::function<void(const std::string& id, const std::string& reason)> on_compromised;
  std::function<void(const std::string& id)> on_heartbeat_missed;
};

class ProbeMonitor {
 public:
  // Starts the thread. `clock` must outlive the monitor.
  static absl::StatusOr<std::unique_ptr<ProbeMonitor>> Create(ProbeMonitorOptions options,
                                                              ProbeCallbacks callbacks,
                                                              const Clock* clock);
  ~ProbeMonitor();  // stops the thread and closes every pipe

  // Watches a sandbox's probe: `report_read` is the read end of its pipe (the agent must have
  // closed its copy of the write end), `probe_pid` the probe process (<= 0: watch the pipe only).
  // The heartbeat clock starts now. Errors: AlreadyExists.
  absl::Status Watch(absl::string_view id, UniqueFd report_read, pid_t probe_pid);

  // Stops watching and closes the pipe. No callback for `id` runs after Forget returns (a
  // callback may itself call Forget).
  void Forget(absl::string_view id);

  // Returns once every line the probe of `id` had written before the call has been handled and
  // its callbacks have returned, or after `timeout`. The probe reports a seccomp violation before
  // it answers the call, so after a command's end this makes its violations known (the agent's
  // command results list them). Returns at once on the monitor's own thread (from a callback)
  // and for a sandbox that is not watched.
  void Settle(absl::string_view id, absl::Duration timeout);

  // NotFound if `id` is not watched.
  absl::StatusOr<ProbeHeartbeat> LastHeartbeat(absl::string_view id) const;

  // Lines dropped because they were too long or not valid probe JSON, over all probes.
  uint64_t bad_lines() const;

 private:
  struct Watched {
    std::string id;
    uint64_t token = 0;
    UniqueFd pipe;
    UniqueFd probe_pidfd;
    pid_t probe_pid = 0;
    std::string buffer;       // an incomplete line
    bool discarding = false;  // inside an over-long line, until its newline
    absl::Time last_seen;     // last heartbeat, or Watch
    int misses_reported = 0;
    ProbeHeartbeat heartbeat;
    bool exited = false;  // the probe said the sandbox's init exited
    bool compromised = false;
  };

  ProbeMonitor(ProbeMonitorOptions options, ProbeCallbacks callbacks, const Clock* clock,
               UniqueFd epoll, UniqueFd wake)
      : options_(options),
        callbacks_(std::move(callbacks)),
        clock_(clock),
        epoll_(std::move(epoll)),
        wake_(std::move(wake)) {}

  using Calls = std::vector<std::function<void()>>;

  void Loop();
  // Reads what the pipe holds (bounded per call); false at end of file.
  bool ReadPipeLocked(Watched& w, Calls& calls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleLineLocked(Watched& w, absl::string_view line, Calls& calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompromiseLocked(Watched& w, std::string reason, Calls& calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckHeartbeatsLocked(Calls& calls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnregisterLocked(Watched& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ProbeMonitorOptions options_;
  const ProbeCallbacks callbacks_;
  const Clock* const clock_;
  const UniqueFd epoll_;
  const UniqueFd wake_;  // eventfd: tells the thread to stop
  std::thread thread_;

  // Held by the thread while it runs callbacks (taken before mu_), so that Forget can wait for
  // callbacks already under way.
  absl::Mutex dispatch_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Watched>, std::less<>> watched_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Watched*> by_token_ ABSL_GUARDED_BY(mu_);  // epoll data -> entry
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t bad_lines_ ABSL_GUARDED_BY(mu_) = 0;
  // Rounds of the loop (an epoll wakeup: read, then callbacks): begun, and whose callbacks have
  // all returned. What a pipe holds now is read by the round after the next at the latest.
  uint64_t rounds_begun_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rounds_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moat::agent
