// moat-probe's loop: one process per sandbox, outside its pid namespace, that watches it and
// reports to the agent (docs/probe.md). poll() waits on three sources and never on the agent:
//
//   pidfd of the sandbox's init ── readable: init exited ──▶ "exited", flush, return
//   seccomp listener ───────────── a notification ───────▶ answer it, "violation" syscall
//   timerfd, every interval ────── tick ─────────────────▶ cgroup figures: "heartbeat",
//                                                           "near_limit", "killed";
//                                                           mount table: "violation" mount
//   report pipe (only when lines wait) ── writable ──────▶ flush the channel
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "node-agent/probe/mount_watch.h"
#include "node-agent/probe/probe_config.h"
#include "node-agent/probe/report_channel.h"
#include "sandbox/cgroup/cgroup_watch.h"
#include "util/unique_fd.h"

namespace moat::agent::probe {

using sandbox::CgroupSample;
using sandbox::CgroupWatch;

class Probe {
 public:
  // Takes over the fds named in `config`, opens the cgroup files and reads the mount baseline.
  static absl::StatusOr<std::unique_ptr<Probe>> Create(const ProbeConfig& config);

  // Runs until the sandbox's init exits; returns the process exit code (0).
  int Run();

 private:
  Probe(const ProbeConfig& config, UniqueFd pidfd, pid_t pid, ReportChannel channel,
        CgroupWatch cgroup)
      : config_(config),
        pidfd_(std::move(pidfd)),
        pid_(pid),
        channel_(std::move(channel)),
        cgroup_(std::move(cgroup)) {}

  void Tick();
  void CheckLimits(const CgroupSample& sample);
  void CheckMounts();
  void HandleSeccomp();
  void Kill(const std::string& kind, double value, double limit);
  void ReportError(const std::string& what);
  bool InitExited() const;
  // Flushes for at most `budget`: the last lines before exit are worth a short wait.
  void Drain(absl::Duration budget);

  const ProbeConfig config_;
  UniqueFd pidfd_;
  const pid_t pid_;
  ReportChannel channel_;
  CgroupWatch cgroup_;
  std::optional<MountWatch> mounts_;
  UniqueFd seccomp_fd_;
  UniqueFd timer_fd_;
  bool memory_near_ = false;
  bool pids_near_ = false;
  bool killed_ = false;
  std::optional<uint64_t> oom_kills_;  // at the last tick; the first reading is the baseline
  std::string last_error_;  // reported once until it changes, so a broken file is not a flood
};

}  // namespace moat::agent::probe
