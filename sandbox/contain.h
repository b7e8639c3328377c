// The ordered steps that turn a fresh clone into a sandboxed command (cf. nsjail's contain.cc).
//
// The child starts in new user, pid, mount, net, uts and ipc namespaces as pid 1, and runs:
//
//   supervisor                          child (pid 1, "init")            command (pid 2)
//   ----------                          ---------------------            ---------------
//   clone3 ───────────────────────────▶ wait for 'M'
//   write uid_map/gid_map, send 'M' ──▶ become root of the user ns
//   attach cgroup (v1: ~6 ms) ┐         loopback up, (plan.sockets: make
//   (receive the sockets ◀────┼──────── them, send them, close them),
//                             │         hostname
//                             │         mounts (MountPlan), pivot_root
//   send 'C' ◀────────────────┘ ──────▶ wait for 'C'; unshare cgroup ns
//                                       drop capabilities, no_new_privs
//                                       vfork-style clone ─────────────▶ setsid, stdio, rlimits
//                                                                        seccomp (listener fd ─▶
//                                                                          supervisor), execve
//   error pipe: EOF = started           wait for the command; send its
//   status ◀─────────────────────────── wait status; exit (the kernel
//                                       kills everything left in the ns)
//
// Everything the child uses is prepared before clone: it only makes system calls on ready data.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/child_trace.h"
#include "sandbox/mounts.h"
#include "sandbox/rlimits.h"
#include "sandbox/userns.h"

namespace moat::sandbox {

// Bytes the supervisor sends on the sync socket.
inline constexpr char kSyncIdsMapped = 'M';
inline constexpr char kSyncInCgroup = 'C';
// Tag of the message that carries the seccomp listener from the command to the supervisor.
inline constexpr char kListenerTag = 'L';
// Tag of the message that carries the plan's sockets from init to the supervisor.
inline constexpr char kSocketsTag = 'N';

// A socket init makes in the sandbox's network namespace, once its loopback is up, for the
// supervisor: bound to `ipv4`:`port` (TCP: listening), close-on-exec and non-blocking. For a
// supervisor that may not enter the namespace itself (an ordinary user's: setns needs
// CAP_SYS_ADMIN over the namespace's owner, the sandbox's user namespace, and init is out of its
// reach; the egress listeners, sandbox_egress.h). Init holds them only until they are sent.
struct ChildSocket {
  int type = 0;       // SOCK_STREAM (listening) or SOCK_DGRAM
  uint32_t ipv4 = 0;  // host byte order
  uint16_t port = 0;
  std::string label;  // for a failure's report, e.g. "127.0.0.1:53 (udp)"
};

// Prepared data for one sandbox. Owned by the supervisor; the child reads its copy.
struct ContainPlan {
  IdMapping ids;
  const MountPlan* mounts = nullptr;
  std::vector<RlimitSetting> rlimits;
  int last_cap = 40;
  std::string hostname = "moat";
  bool loopback_ready = false;  // born in a prepared network namespace whose lo is up
  // Made by init and sent, in this order and in one message, on sync_fd (at most
  // kMaxPassedFds, util/fd_passing.h). Init must own its network namespace (clone3 made it): a
  // prepared one belongs to the host's user namespace, where init may not bind ports below 1024.
  std::vector<ChildSocket> sockets;

  // The command. `argv`/`envp` point into the storage vectors and end with nullptr.
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::string search_path;  // PATH value, searched when argv[0] has no '/'
  std::vector<char*> argv;
  std::vector<char*> envp;

  // No command: init installs the filter itself and then serves Exec requests (reaper.h),
  // after exec'ing the moat-init program behind `reaper_exec_fd` (an O_PATH fd, kept open until
  // then) with `reaper_argv_storage` when that is set, else in place.
  bool reaper = false;
  int reaper_exec_fd = -1;
  std::vector<std::string> reaper_argv_storage;
  std::vector<char*> reaper_argv;

  const struct sock_fprog* seccomp = nullptr;  // required
  bool seccomp_listener = false;

  // Descriptors, valid in the child (clone copies the table).
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int sync_fd = -1;   // SOCK_SEQPACKET to the supervisor
  int error_fd = -1;  // CLOEXEC pipe; a ChildFailure record on error

  ChildTrace* trace = nullptr;  // MOAT_TRACE: stamp the steps here (shared memory)

  // Fills argv/envp from the storage vectors. Call after changing them.
  void Finalize();
};

// Runs in the cloned child. Never returns.
[[noreturn]] void ContainAndRun(const ContainPlan& plan);

}  // namespace moat::sandbox
