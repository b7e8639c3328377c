// A long-lived sandbox's init: a tiny pid-1 reaper that starts commands on request.
//
// `moat run` sandboxes run one command and end with it. A long-lived sandbox (live_sandbox.h)
// keeps its namespaces, mounts, cgroup and /workspace for many commands: its init, after the same
// setup steps (contain.h), installs the seccomp filter once for itself and every later process,
// then loops here. It is a raw clone of the supervisor, so it only makes system calls on fixed
// buffers: no allocation, no locks.
//
//   supervisor                                init (pid 1)                  command
//   ----------                                ------------                  -------
//   Exec{seq, cwd, argv, env} + 3 fds ──────▶ clone ─────────────────────▶ setsid, stdio, chdir,
//                                             wait for execve (CLOEXEC       rlimits, execve
//   Started{seq, pid | errno, step} ◀──────── error pipe: EOF = started)
//   Signal{seq, signo} ─────────────────────▶ its tree: kill(-pgid), kill(each member)
//   Exited{seq, wait status} ◀─────────────── SIGCHLD (signalfd), waitpid
//   close the socket ───────────────────────▶ EOF: exit; the kernel kills every process left
//                                             (with a restart grace: wait for a new supervisor)
//
// Orphans (background children of finished commands) are reaped silently. A command's process
// group is its pid (setsid); Signal addresses it and every process of the command's tree (read
// from /proc's parent links), so one that leaves the group with its own setsid is reached too.
// The command is a child subreaper, so what it starts stays in its tree while it lives; after a
// Signal, what is left of the tree when the command exits is killed (it would be reparented to
// init and lost). SIGKILL stops the whole tree first (round after round), then kills it.
// A command that ends normally leaves its background processes running, as before.
//
// Restart grace (moat-init --restart-grace-ms=N, N > 0): the supervisor may go away and a new one
// take the sandbox over (node-agent's re-adoption, docs/agent.md). Exec then carries two more
// descriptors, the read ends of the command's stdout and stderr pipes, which init holds while the
// command runs (so its output waits in the pipes, and a write never meets a closed pipe) and
// until its Exited event reached a supervisor. On EOF init makes a new socket pair, leaves the
// supervisor's end at kReaperSyncFd for the next supervisor to take (pidfd_getfd), keeps running
// and reaping, and buffers Exited events. A new supervisor sends Adopt on that end; init answers
// one AdoptCommand per command it knows (running, or exited meanwhile with its wait status), each
// with the two read ends, then AdoptDone. Nobody within the grace: init exits, as without one.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "sandbox/contain.h"
#include "sandbox/rlimits.h"

namespace moat::sandbox {

// Requests to init, one SOCK_SEQPACKET message each. Exec carries its strings after the header
// and stdin, stdout, stderr as SCM_RIGHTS.
enum class ReaperOp : uint32_t {
  kExec = 1,
  kSignal = 2,
  kStarted = 3,
  kExited = 4,
  kAdopt = 5,         // request: a new supervisor takes the sandbox over
  kAdoptCommand = 6,  // event: pid, status (wait status if step[0] == 'x'), 2 fds
  kAdoptDone = 7,     // event: every command was listed
};

struct ReaperRequest {
  ReaperOp op;
  uint32_t seq;    // the supervisor's id of the command
  int32_t signal;  // kSignal
  uint32_t argc;   // kExec: then `cwd\0 argv[0]\0 ... env[0]\0 ...` (NAME=VALUE)
  uint32_t envc;
  uint32_t strings_len;  // bytes of strings after the header
};

struct ReaperEvent {
  ReaperOp op;  // kStarted or kExited
  uint32_t seq;
  int32_t pid;     // kStarted: the command's pid inside the sandbox (0 if it failed)
  int32_t status;  // kStarted: errno of the failed step (0: execve done); kExited: wait status
  char step[48];   // kStarted with an error: the step that failed, NUL-terminated
};

// Bounds of one Exec: the message must fit the socket's send buffer (~208 KiB by default), and
// init keeps its arrays fixed.
inline constexpr size_t kReaperMaxStrings = 128 * 1024;
inline constexpr size_t kReaperMaxArgs = 4096;      // argc + envc
inline constexpr size_t kReaperMaxCommands = 1024;  // running at once

// Runs in init once its setup is done (privileges dropped, seccomp installed). Never returns:
// exits when the supervisor closes its end of `sync_fd`. Commands get `rlimits` (n of them).
//
// Init is a clone of the supervisor: its page tables are a copy of a whole daemon's (~350 KiB
// for moat-agent). So when the plan names it, init execs the small static `moat-init` program
// (init_main.cc), which calls this with what its command line says; otherwise init runs it in
// place.
// `restart_grace_ms` > 0: the supervisor's EOF starts a grace instead (see above).
[[noreturn]] void RunReaper(int sync_fd, const RlimitSetting* rlimits, size_t n,
                            uint32_t restart_grace_ms = 0);

// moat-init's command line: "--sync-fd=N", one "--rlimit=RESOURCE:SOFT:HARD" per setting and
// "--restart-grace-ms=N".
inline constexpr int kReaperSyncFd = 3;  // where init puts its socket before the exec

}  // namespace moat::sandbox
