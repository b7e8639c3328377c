// The real SandboxBackend: long-lived kernel sandboxes (sandbox/live_sandbox.h) whose commands
// the agent starts, streams, times out and interrupts, with files reached from outside.
//
// One event thread serves every sandbox: an epoll set over each sandbox's init socket (Started
// and Exited events) and each running command's stdout and stderr pipes. It delivers output as
// it arrives and calls on_exit once a command has exited and its pipes are drained. A command
// whose consumer is behind (its accepts_more said false) is held: its pipes stay in the set with
// no events asked for (epoll still reports a hang-up, so a pipe whose writers are gone is
// drained), until ResumeOutput asks for input again. A command's
// callbacks run under its own mutex, so the event thread and Destroy (which ends the commands of
// the sandbox it kills) never call them concurrently.
//
// Where a sandbox's things live, so that Destroy and CleanLeftovers can find and check them:
//   processes   in the sandbox's pid namespace; init is a child of the agent, and exits when the
//               agent's end of its socket closes (so a killed agent leaves no sandbox running)
//   cgroup      <hierarchy>/moat/<agent pid>-<id>: CleanupStaleCgroups removes it once the
//               agent's pid is gone; with a restart grace keep-<id> (found by its record; one
//               no record names is removed once empty, at start and whenever a kept sandbox
//               ends: kept_cgroups.h)
//   mounts      only in the sandbox's own mount namespace (its /workspace and /tmp are tmpfs
//               there): nothing is mounted on the host, and the namespace dies with the last
//               process. Destroy checks that no process is left in it.
//   record      <state_dir>/sandboxes/<id>.json: init's pid and start time, cgroups, probe,
//               restart grace; for Adopt and CleanLeftovers. Written atomically (rename).
//   spool       <state_dir>/spool/<id>, with a restart grace: each running command's tag and
//               every chunk of output the agent read, appended (emptied whenever nothing runs),
//               so that a restarted agent has it (Adopt)
//
// Sandboxes that outlive their agent (restart_grace > 0, docs/agent.md): init keeps the
// sandbox for the grace after its socket closes, holding each command's pipes (reaper.h). Release
// closes the sockets without killing; the next agent's Adopt takes each sandbox whose init is
// still the recorded one over: a new socket from init (pidfd_getfd), its cgroup (keep-<id>), the
// seccomp listener from the old probe (which it then kills) for a new probe, and init's list of
// commands with their pipes; a sandbox whose old probe is gone lost that listener and is ended
// instead. Init and the probe leave the agent's cgroups at creation (cgroup_detach.h), so that
// stopping the agent's container does not kill them. A sandbox with egress is served again from
// its record's policy (its proxy lives in the agent: nothing listens between the two agents).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "node-agent/backend/backend.h"
#include "sandbox/host_view.h"
#include "sandbox/live_sandbox.h"
#include "util/unique_fd.h"

namespace moat::agent {

struct KernelBackendOptions {
  std::string state_dir = "/var/lib/moat-agent";  // must exist; root-only
  // Egress audit log of every sandbox with network (hidden inside each).
  std::string audit_log = "/var/lib/moat/egress-audit.jsonl";
  // Host files of the agent's own (AgentOwnFiles: its config, tokens, keys), covered in every
  // sandbox as state_dir and audit_log are.
  std::vector<std::string> private_paths;
  // Called once per sandbox after it started (e.g. to start its probe); an error fails Create.
  // `box` stays valid until on_destroy(id) returns.
  std::function<absl::Status(const std::string& id, sandbox::LiveSandbox& box,
                             const sandbox::Limits& limits)>
      on_start;
  std::function<void(const std::string& id)> on_destroy;
  // Each egress request of a sandbox with network, as the proxy decides it (its threads).
  std::function<void(const std::string& id, bool allowed, const std::string& detail)> on_egress;
  // Before the on_exit of a command with settle_reports: returns once what the sandbox's probe
  // reported until then has been handled (ProbeMonitor::Settle), or after `timeout`.
  std::function<void(const std::string& id, absl::Duration timeout)> settle_probe;
  // The probe's last heartbeat, for Probe(); InfinitePast when not given.
  std::function<absl::Time(const std::string& id)> last_heartbeat;
  // > 0: sandboxes outlive a released or dead agent by this much (Release, Adopt).
  absl::Duration restart_grace = absl::ZeroDuration();
  // The pid of the sandbox's probe (after on_start), for the record; -1 or unset: none.
  std::function<pid_t(const std::string& id)> probe_pid;
};

class KernelBackend final : public SandboxBackend {
 public:
  // Errors: what the node lacks (cgroups, user namespaces, seccomp), with what to do.
  static absl::StatusOr<std::unique_ptr<KernelBackend>> Create(KernelBackendOptions options);
  ~KernelBackend() override;  // Destroys every sandbox still alive, then stops the thread.

  absl::StatusOr<CreatedSandbox> Create(const SandboxSpec& spec) override;
  absl::StatusOr<CleanupReport> Destroy(absl::string_view id) override;
  absl::StatusOr<std::string> Exec(absl::string_view id, const ExecRequest& request,
                                   ExecCallbacks callbacks) override;
  absl::Status Interrupt(absl::string_view id, absl::string_view command_id,
                         absl::Duration grace) override;
  void ResumeOutput(absl::string_view id, absl::string_view command_id) override;
  absl::StatusOr<std::string> ReadFile(absl::string_view id, absl::string_view path,
                                       uint64_t offset, uint64_t length) override;
  absl::StatusOr<OpenedFile> OpenFile(absl::string_view id, absl::string_view path) override;
  absl::Status WriteFile(absl::string_view id, absl::string_view path, absl::string_view data,
                         uint32_t mode) override;
  absl::StatusOr<FileInfo> Stat(absl::string_view id, absl::string_view path) override;
  absl::StatusOr<std::vector<FileInfo>> List(absl::string_view id, absl::string_view path) override;
  absl::Status MakeDirectory(absl::string_view id, absl::string_view path) override;
  absl::Status Move(absl::string_view id, absl::string_view from, absl::string_view to) override;
  absl::Status SetMode(absl::string_view id, absl::string_view path, uint32_t mode) override;
  absl::Status Remove(absl::string_view id, absl::string_view path) override;
  absl::Status Pause(absl::string_view id) override;
  absl::Status Resume(absl::string_view id) override;
  absl::StatusOr<SandboxHealth> Probe(absl::string_view id) override;
  absl::Status CheckNode() override;
  NodeUsage Usage() override;
  absl::StatusOr<CleanupReport> CleanLeftovers() override;
  absl::StatusOr<std::vector<AdoptedSandboxInfo>> Adopt() override;
  absl::Status Reattach(absl::string_view id, absl::string_view command_id,
                        ExecCallbacks callbacks) override;
  void Release() override;

  // The sandbox's init pid on the host (tests, the probe); -1 if unknown.
  pid_t InitPid(absl::string_view id) const;
  const sandbox::CgroupLayout& cgroup_layout() const { return factory_->cgroup_layout(); }

 private:
  struct Command;
  struct Box;
  struct Watch;  // what an epoll token stands for

  KernelBackend(KernelBackendOptions options, std::unique_ptr<sandbox::SandboxFactory> factory,
                UniqueFd epoll, UniqueFd wake, UniqueFd dev_null);

  absl::StatusOr<std::shared_ptr<Box>> Find(absl::string_view id) const;
  // The sandbox's root (an O_PATH fd of /proc/<init>/root), for the file methods.
  absl::StatusOr<UniqueFd> RootOf(absl::string_view id) const;
  uint64_t AddWatchLocked(int fd, Watch watch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWatchLocked(uint64_t token, int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the loop reads a command's pipes (backpressure: ExecCallbacks::accepts_more).
  void SetHeldLocked(Command& command, bool held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake();

  void Loop();
  void HandleInitEvents(const std::shared_ptr<Box>& box);
  void HandleOutput(const std::shared_ptr<Command>& command, bool is_stderr);
  // Drains the pipes, closes them, calls on_exit (once) and forgets the command.
  void FinishCommand(const std::shared_ptr<Box>& box, const std::shared_ptr<Command>& command,
                     const std::string& error);
  absl::Duration EnforceDeadlines();  // returns the time until the next deadline
  absl::Status WriteRecord(const Box& box);
  // Takes over the sandbox of one record; its commands into `info`.
  absl::StatusOr<std::shared_ptr<Box>> AdoptOne(const std::string& id, const std::string& text,
                                                AdoptedSandboxInfo* info);
  // Exec's second half, for one argv: registers, sends and waits for the start. With
  // `exec_failed` (a direct exec), an execve failure sets it and leaves the callbacks in
  // `*callbacks` for a second try; else they are the command's.
  absl::StatusOr<std::string> StartCommand(const std::shared_ptr<Box>& box,
                                           const ExecRequest& request, const std::string& cwd,
                                           const std::vector<std::string>& argv,
                                           const std::vector<std::string>& env,
                                           ExecCallbacks* callbacks, bool* exec_failed);
  std::string SpoolPath(absl::string_view id) const;
  // What no sandbox may see of the host: state_dir and private_paths.
  std::vector<std::string> PrivatePaths() const;
  // The probe's pid and start time into `box` (options_.probe_pid), and the probe out of this
  // agent's cgroups (cgroup_detach.h): for kept sandboxes, whose probe outlives the agent.
  absl::Status RecordProbe(Box& box);
  // Removes the keep-* cgroups that no sandbox of ours and no record names (kept_cgroups.h);
  // returns how many.
  absl::StatusOr<int> RemoveUnusedKeptCgroups();

  const KernelBackendOptions options_;
  const std::unique_ptr<sandbox::SandboxFactory> factory_;
  const sandbox::HostContext host_;
  const UniqueFd epoll_;
  const UniqueFd wake_;  // eventfd: the loop recomputes its deadlines
  const UniqueFd dev_null_;

  mutable absl::Mutex mu_;
  absl::CondVar started_cv_;
  absl::flat_hash_map<std::string, std::shared_ptr<Box>> boxes_ ABSL_GUARDED_BY(mu_);
  // Ids whose Create is under way: their cgroup may exist before their record does.
  absl::flat_hash_set<std::string> creating_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<Watch>> watches_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;

  std::atomic<bool> stop_{false};
  std::thread loop_;
};

}  // namespace moat::agent
