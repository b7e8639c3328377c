// A long-lived sandbox: made once, then used for many commands until it is destroyed.
//
// The same kernel setup as `moat run` (contain.h: user, pid, mount, net, uts, ipc and cgroup
// namespaces, the read-only root, /proc, /dev, /tmp, /workspace, no capabilities, the seccomp
// filter, cgroup limits, egress), but init does not run one command and exit: it waits as a tiny
// reaper (reaper.h) and starts each command the supervisor sends. Commands see the same /tmp and
// /workspace, so files stay between commands until the sandbox is destroyed.
//
// This is the runtime half of moat-agent's kernel backend (node-agent/kernel_backend.h): it
// knows nothing of HTTP, ids or pools. Output, timeouts and bookkeeping of commands are the
// caller's: it passes each command's stdio descriptors and reads Started/Exited events.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/egress/sandbox_egress.h"
#include "sandbox/host_setup.h"
#include "sandbox/mounts.h"
#include "sandbox/output/result.h"
#include "sandbox/policy/policy.h"
#include "sandbox/reaper.h"
#include "sandbox/seccomp/seccomp_filter.h"
#include "sandbox/userns.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

struct LiveSandboxOptions {
  // The cgroup's name: letters, digits, '.', '_', '-'. Start it with this process's pid
  // ("<pid>-...") so that CleanupStaleCgroups removes it if the process dies without cleaning.
  std::string name;
  Limits limits;  // cpu_timeout is a per-process RLIMIT_CPU backstop; wall_timeout is unused
  MountOptions mounts;
  std::optional<egress::EgressOptions> egress;
  // > 0: the sandbox outlives its supervisor by this much, waiting to be taken over (reaper.h,
  // LiveSandbox::Adopt). Needs the moat-init program; ignored without it.
  uint32_t restart_grace_ms = 0;
};

// A command of an adopted sandbox, as its init reported it (ReaperOp::kAdoptCommand).
struct AdoptedCommand {
  uint32_t seq = 0;
  pid_t pid = 0;  // inside the sandbox
  bool exited = false;
  int wait_status = 0;  // if exited
  UniqueFd out, err;    // read ends of its stdout and stderr pipes
};

// What Destroy found and removed.
struct LiveSandboxTeardown {
  int processes_killed = 0;  // processes still alive in the sandbox when it was destroyed
  bool cgroup_removed = false;
  std::vector<Violation> egress_denials;
  std::vector<std::string> residue;  // what could not be removed, e.g. a cgroup directory
};

class LiveSandbox {
 public:
  ~LiveSandbox();  // Destroy(), if not done

  // Asks init to start a command. Returns at once; the result comes as a kStarted event (then a
  // kExited one) with this `seq`. `env` is the whole environment (NAME=VALUE); `cwd` is absolute
  // inside the sandbox. The descriptors are duplicated into init; the caller keeps (and closes)
  // its own. Errors: InvalidArgument (too big, empty argv), ResourceExhausted (init's queue is
  // full), FailedPrecondition (init is gone). Thread-safe.
  // With a restart grace, pass the pipes' read ends too: init holds them (reaper.h).
  absl::Status SendExec(uint32_t seq, const std::string& cwd, const std::vector<std::string>& argv,
                        const std::vector<std::string>& env, int stdin_fd, int stdout_fd,
                        int stderr_fd, int stdout_read_fd = -1, int stderr_read_fd = -1);
  // Sends `signo` to the process group of command `seq` (if it still runs). Thread-safe.
  absl::Status SendSignal(uint32_t seq, int signo);

  // Readable when init has sent an event, or has exited (then ReadEvent fails).
  int event_fd() const { return sync_.get(); }
  // The next event, without blocking; nullopt if none is waiting. FailedPrecondition once init
  // has exited (the sandbox is dead). Call from one thread at a time.
  absl::StatusOr<std::optional<ReaperEvent>> ReadEvent();

  pid_t pid() const { return pid_; }  // init, in this process's pid namespace
  int pidfd() const { return pidfd_.get(); }
  bool Alive() const;  // init has not exited
  // The seccomp listener, for whoever answers the filter's notifications (a probe); once.
  UniqueFd TakeSeccompListener() { return std::move(seccomp_listener_); }
  bool holds_seccomp_listener() const { return static_cast<bool>(seccomp_listener_); }
  Arch seccomp_arch() const { return arch_; }
  Cgroup& cgroup() { return *cgroup_; }
  // DefaultSandboxEnv() with the egress proxy's variables: what a command's env starts from.
  const std::vector<std::pair<std::string, std::string>>& base_env() const { return base_env_; }

  // Kills every process (init first: the pid namespace dies with it), reaps init, stops the
  // egress proxy and removes the cgroup. Idempotent; a second call returns an empty teardown.
  LiveSandboxTeardown Destroy();

  // Lets go of the sandbox without ending it: with a restart grace its init waits for a new
  // supervisor (Adopt); without one it exits as its socket closes. Unusable afterwards.
  void Release();

  // Takes over a sandbox a previous supervisor released (or lost): `pidfd` of its init, `sync`
  // the supervisor's end of init's new socket (pidfd_getfd of kReaperSyncFd), its cgroup and
  // seccomp listener. Sends Adopt and returns init's list of commands, within `timeout`.
  // Errors: DeadlineExceeded or FailedPrecondition (init did not answer: not adoptable).
  static absl::StatusOr<std::unique_ptr<LiveSandbox>> Adopt(
      pid_t pid, UniqueFd pidfd, UniqueFd sync, std::unique_ptr<Cgroup> cgroup,
      UniqueFd seccomp_listener, uint32_t restart_grace_ms, absl::Duration timeout,
      std::vector<AdoptedCommand>* commands);

  // An adopted sandbox's egress, whose proxy lived in the previous supervisor: binds the proxy's
  // and the DNS stub's listeners again on the sandbox's own 127.0.0.1 (from outside, as at the
  // start) and serves them; base_env() gets the proxy variables again. While no supervisor ran
  // nothing listened there, so the sandbox had no way out. Errors (a port the sandbox took
  // meanwhile, ...): the caller must not serve the sandbox (fail closed).
  absl::Status ResumeEgress(const egress::EgressOptions& options);

  // Waits, at most `timeout`, until its egress proxy serves no connection (every decision made
  // so far reported to the observer); true at once without egress.
  bool AwaitEgressIdle(absl::Duration timeout) {
    return egress_ == nullptr || egress_->AwaitIdle(timeout);
  }

  uint32_t restart_grace_ms() const { return restart_grace_ms_; }

 private:
  friend class SandboxFactory;
  LiveSandbox() = default;

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd sync_;
  UniqueFd seccomp_listener_;
  Arch arch_ = NativeArch();
  std::unique_ptr<Cgroup> cgroup_;
  std::unique_ptr<egress::EgressSession> egress_;
  std::vector<std::pair<std::string, std::string>> base_env_;
  uint32_t restart_grace_ms_ = 0;
  absl::Mutex destroy_mu_;
  bool destroyed_ ABSL_GUARDED_BY(destroy_mu_) = false;
};

// Makes the agent's sandboxes from what is computed once per process (HostSetup: the cgroup
// layout, the id mapping, the seccomp program), each prepared as `moat run`'s are (prepare.h).
// Thread-safe: Start may run on many threads at once.
class SandboxFactory {
 public:
  // `init_binary`: the moat-init program (reaper.h); empty: the one next to the running
  // program, else this build's. Without one, init serves in place (more memory per sandbox).
  static absl::StatusOr<std::unique_ptr<SandboxFactory>> Create(std::string init_binary = "");

  // Makes a sandbox and returns once its init waits for commands. Any failing step is an error
  // naming it, and nothing of the sandbox is left.
  absl::StatusOr<std::unique_ptr<LiveSandbox>> Start(const LiveSandboxOptions& options);

  const CgroupLayout& cgroup_layout() const { return host_->cgroup_layout(); }
  const IdMapping& ids() const { return host_->ids(); }
  // The moat-init program sandboxes exec, or "" if they serve in place.
  const std::string& init_binary() const { return init_path_; }

 private:
  SandboxFactory(std::unique_ptr<HostSetup> host, const SeccompProgram* seccomp)
      : host_(std::move(host)), seccomp_(seccomp) {}

  std::string init_path_;
  UniqueFd init_fd_;  // O_PATH of init_path_
  const std::unique_ptr<const HostSetup> host_;
  const SeccompProgram* const seccomp_;  // host_'s, without the creation guard's calls
};

}  // namespace moat::sandbox
