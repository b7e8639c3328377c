// The creation guard: protected paths that do not exist yet cannot be made by the sandbox.
//
// A read-only bind covers a protected path that exists (protected_paths.h); one that does not
// exist has nothing to bind over, and under a writable host directory the sandbox could create
// it (.git/hooks/pre-commit, .pi/extensions/evil.ts) for the host to run later. No mount and no
// LSM rule of ours can tell "create .envrc" from "create main.py" in the same directory, so the
// calls that add a name to a directory (CreationCalls(), seccomp_policy.h) are taken out of the
// sandbox's hands: the seccomp filter turns each into a user notification
// (SeccompOptions::guard_creation), the supervisor passes those to this guard, a thread of its
// own, and the guard makes the name itself, unless it is protected.
//
//   sandboxed thread                 kernel                      guard thread (chrooted into the
//   openat(dfd, "a/b", O_CREAT) ───▶ USER_NOTIF, caller waits ─▶ sandbox's root, the caller's
//                                                                fsuid, fsgid, groups and umask)
//                                                                 read "a/b" from its memory
//                                                                 open its dfd (/proc/<tid>/fd)
//                                                                 resolve "a" from there, as the
//                                                                   kernel would for it: its
//                                                                   mounts, its root, its
//                                                                   permissions
//                                                                 ID_VALID: still the same caller
//                                                                 (dev, ino of "a", "b") protected?
//                                                                   yes: EROFS and a violation
//                                                                   no:  openat(a_fd, "b", ...)
//   returns the new fd ◀──────────── ADDFD + SEND ◀───────────── the fd, installed in the caller
//
// Never "continue": the guard acts on the copy of the path it checked and on the directory it
// resolved, so another thread rewriting the path or swapping a directory for a symlink after the
// check changes nothing. Protection is by the directory's identity, so no spelling, symlink,
// bind, hard link or rename reaches a protected name under another path. If the guard goes away,
// the kernel fails the guarded calls with ENOSYS: the sandbox stays shut.
//
// Only sandboxes with a writable host directory need it (`moat run` with allowWrite or
// --workspace); tmpfs /tmp and /workspace are the sandbox's own. Each creation then costs a round
// trip to the guard (measured: a shell loop of 200 `echo x > f$i` ran ~0.5 ms longer, 12.1 vs
// 11.6 ms per run, on a loaded 2-core machine). The thread needs CAP_SYS_CHROOT (root); for an
// ordinary user's run (Options::join_user_namespace) the guard is a process forked from the
// supervisor that joins the sandbox's user namespace first (a thread cannot), talks to the
// supervisor over a socket pair and otherwise does the same.
#pragma once

#include <sys/types.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sandbox/output/result.h"
#include "sandbox/policy/protected_paths.h"
#include "sandbox/seccomp/seccomp_filter.h"
#include "sandbox/seccomp/seccomp_notify.h"
#include "sandbox/seccomp/seccomp_policy.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

class CreationGuard {
 public:
  struct Options {
    UniqueFd listener;       // a duplicate of the sandbox's seccomp listener, to answer on
    pid_t sandbox_pid = -1;  // a process of the sandbox (its init): names resolve in its root
    std::vector<ProtectedEntry> protected_entries;
    std::vector<ProtectedGlob> protected_globs;
    Arch arch = NativeArch();
    // Rootless (the supervisor is an ordinary user): the guard is a process that joins the
    // sandbox's user namespace, where the user holds the capabilities the guard needs
    // (chroot, reading the caller, its ids), instead of a thread with the host's. It joins at
    // the first creating call, through that caller (the sandbox's init is not dumpable, so the
    // user cannot reach its namespaces), and serves only callers with that caller's root; if
    // it cannot, every creating call fails (EPERM) and Stop() reports why.
    bool join_user_namespace = false;
  };

  // What the guard knows of a calling thread (creation_guard.cc).
  struct Caller;

  // Starts the guard's thread and waits until it stands in the sandbox's root. Fails, naming the
  // step, if it cannot: the caller must then not let the command run.
  static absl::StatusOr<std::unique_ptr<CreationGuard>> Start(Options options);

  // Whether `request` (received from the listener by the supervisor) is the guard's: a call
  // that adds a name, with no set-user-ID or set-group-ID mode (those are violations; the filter
  // sends both the same way).
  bool Takes(const SeccompRequest& request) const;

  // Queues a request the guard takes; its thread answers it. Never blocks on the sandbox.
  void Submit(const SeccompRequest& request);

  ~CreationGuard();
  CreationGuard(const CreationGuard&) = delete;
  CreationGuard& operator=(const CreationGuard&) = delete;

  // Stops the thread (call it once the sandbox has ended: requests still queued are dropped).
  // Returns each refused creation once, in order.
  std::vector<Violation> Stop();

 private:
  explicit CreationGuard(Options options);
  // Puts the calling thread in the root of `root_of`, with only the capabilities it needs.
  absl::Status SetUp(pid_t root_of, UniqueFd* proc_fd, UniqueFd* root_fd) const;
  // Answers one request; returns a refusal's detail.
  std::optional<std::string> Handle(const SeccompRequest& request, int proc_fd, int root_fd,
                                    Caller* current) const;
  void Record(std::string detail);
  void Serve();
  // join_user_namespace: the guard process (fork), its loop, and its end.
  absl::Status StartProcess();
  [[noreturn]] void ServeProcess(int sock);
  std::vector<Violation> StopProcess();

  Options options_;
  absl::flat_hash_map<int, const CreationCall*> calls_;  // by syscall number; set before Start
  std::thread thread_;
  pid_t process_ = -1;  // join_user_namespace: the guard process
  UniqueFd sock_;       // and the supervisor's end of its socket pair
  mutable absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status setup_ ABSL_GUARDED_BY(mu_);
  std::deque<SeccompRequest> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<Violation> violations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::sandbox
