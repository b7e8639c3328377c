// The seam between the agent and the runtime: everything the agent needs from sandbox/.
//
// The agent (registry, API, metrics, pool, recycling) decides *what* happens to a sandbox and
// when; a SandboxBackend does it in the kernel. The real backend (namespaces, cgroups, mounts, a
// pid-1 reaper that commands join) is written against this contract; FakeBackend is an in-memory
// one for tests. Every method is thread-safe: the HTTP server calls them from a thread pool.
//
// Ids are chosen by the agent (see IsValidSandboxId) and are unique for the life of a state dir,
// so a backend can name its cgroups, mounts and workspace directories after them and find them
// again after a crash (CleanLeftovers).
//
// Lifecycle of one sandbox, as the backend sees it:
//
//   Create ──▶ (alive) ──Exec*──▶ (alive) ──Destroy──▶ (gone)
//                 │                                ▲
//                 └── dies on its own (OOM, ...) ──┘  Probe reports it; Destroy still cleans.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node-agent/config/limits.h"
#include "util/unique_fd.h"

namespace moat::agent {

// What a sandbox is made from. Environment variables are not here: a warm sandbox is made
// before its user is known, so the agent passes a sandbox's env with every Exec.
struct SandboxSpec {
  std::string id;        // Chosen by the agent; IsValidSandboxId(id) holds.
  std::string profile;   // The config profile's name (for logs and leftover cleanup).
  std::string root_dir;  // Host directory mounted read-only as the sandbox's "/".
  // The policy document, in the format of `moat run --policy` files (YAML; JSON is YAML too).
  // Empty: the runtime's default policy.
  std::string policy;
  Limits limits;
};

enum class StartPath { kWarm, kCold };

struct CreatedSandbox {
  StartPath path = StartPath::kCold;  // kWarm if made from a pre-started sandbox.
  absl::Duration start_duration;      // Wall time the backend spent in Create.
};

// What Destroy or CleanLeftovers removed. `residue` lists what could not be removed (a path
// still mounted, a file left on disk, a cgroup that would not go away): the agent reports it and
// never reuses the id.
struct CleanupReport {
  int processes_killed = 0;
  int cgroups_removed = 0;
  int mounts_unmounted = 0;
  int workspaces_removed = 0;
  std::vector<std::string> residue;

  CleanupReport& operator+=(const CleanupReport& other);
  bool clean() const { return residue.empty(); }
  std::string ToString() const;  // "killed 3 processes, removed 1 cgroup, ..." for logs.
};

struct ExecRequest {
  // Run by /bin/sh -c inside the sandbox, as execd's RunCommand does; plain words are exec'd
  // directly, as the shell would run them (direct_command.h).
  std::string command;
  std::string cwd;  // Absolute path inside the sandbox; empty: /workspace.
  std::vector<std::pair<std::string, std::string>> env;  // The whole environment of the command.
  absl::Duration timeout = absl::InfiniteDuration();     // Wall-clock; then the tree is killed.
  // CPU time the sandbox's cgroup may use while the command runs; then the command's tree is
  // killed (cpu_timed_out). The cgroup is the sandbox's, so commands running beside it count:
  // meant for a sandbox that runs one command (POST /v1/run's). Infinite: none.
  absl::Duration cpu_timeout = absl::InfiniteDuration();
  // Opaque to the backend: kept with the command where it outlives the agent, and given back
  // by Adopt (the execd layer keeps its own id and request there).
  std::string tag;
  // Its result is read as `moat run --json`'s (POST /v1/run): before on_exit, the backend lets
  // what watches the sandbox report what happened until the command's end (its probe's seccomp
  // violations, its egress proxy's denials), so that the caller's list of them is complete.
  bool settle_reports = false;
};

// A command of a re-adopted sandbox (SandboxBackend::Adopt).
struct AdoptedCommandInfo {
  std::string command_id;  // the backend's, for Reattach and Interrupt
  std::string tag;         // ExecRequest::tag
  bool exited = false;     // ended while no agent ran; Reattach delivers its output and exit
};

// A sandbox a previous agent left running, now this backend's again.
struct AdoptedSandboxInfo {
  std::string id;
  std::vector<AdoptedCommandInfo> commands;
};

struct ExecExit {
  int exit_code = -1;          // Valid when signal == 0 and error is empty.
  int signal = 0;              // The signal that ended the command, if any.
  bool timed_out = false;      // Killed because the timeout passed.
  bool cpu_timed_out = false;  // Killed because the sandbox used the request's cpu_timeout.
  bool interrupted = false;
  // It failed (non-zero exit or a signal) and the OOM killer ended a process of the sandbox
  // since the last command that failed: the shell of `sh -c 'python3 ...'` exits 137 when its
  // python is killed, so the exit status alone does not say it. Commands share the sandbox's
  // memory limit; the OOM killer's victim may be another command's process.
  bool oom_killed = false;
  absl::Duration duration;
  std::string error;  // Set if the command could not be started inside the sandbox.
  // The sandbox cgroup's figures across the command, read when it ended for a command with a
  // cpu_timeout (POST /v1/run's) or one that failed (nullopt otherwise, or when they could not
  // be read: the reads cost milliseconds on cgroup v1, too much for every warm command):
  // the CPU time it used from the command's start to its end, and the highest memory it was
  // charged since it was made (v2 memory.peak; v1 memory.max_usage_in_bytes less what a reused
  // cgroup still held, as `moat run` reports it). Exact for a sandbox that runs one command;
  // with several, they are the sandbox's, not the command's alone.
  std::optional<absl::Duration> cpu;
  std::optional<uint64_t> peak_memory_bytes;
  // Since the sandbox was made: processes the OOM killer ended and forks refused at its pids
  // limit (`moat run`'s memory and pids violations).
  std::optional<uint64_t> sandbox_oom_kills, sandbox_pids_limit_hits;
};

// Callbacks of one command. They run on a backend thread, never inside the caller of Exec, and
// never concurrently with each other for the same command. on_stdout/on_stderr get the raw bytes
// in order as they come (the agent sanitises them); on_exit is called exactly once, last.
struct ExecCallbacks {
  std::function<void(absl::string_view chunk)> on_stdout;
  std::function<void(absl::string_view chunk)> on_stderr;
  std::function<void(const ExecExit& exit)> on_exit;
  // Backpressure, optional (unset: output is always read). Asked after each chunk it delivered
  // to on_stdout or on_stderr, with the other callbacks' guarantees; false: the backend stops
  // reading the command's stdout and stderr, so the command blocks on a full pipe (as under
  // OpenSandbox's execd, where a slow reader slows the command), until ResumeOutput. A held
  // command still times out and can be interrupted; its end still drains what its pipes hold.
  std::function<bool()> accepts_more;
};

// What an entry is. kSymlink only where a link itself is described: List (which never follows
// links) and Stat of a link that leads nowhere.
enum class FileType { kFile, kDirectory, kSymlink, kOther /* FIFO, socket, device */ };

// One entry of a directory listing or a stat; `path` is the path inside the sandbox.
struct FileInfo {
  std::string path;
  bool is_dir = false;  // type == kDirectory
  uint64_t size = 0;
  uint32_t mode = 0;  // Permission bits (07777).
  absl::Time modified;
  FileType type = FileType::kFile;
};

// A regular file opened for reading, once: a download or a replace reads all of it through this
// descriptor, so a file renamed or swapped meanwhile cannot mix two files into one answer.
struct OpenedFile {
  UniqueFd fd;    // Read-only; read it with pread.
  FileInfo info;  // Of the opened file.
};

struct SandboxHealth {
  bool alive = false;         // The sandbox's init (reaper) still runs.
  absl::Time last_heartbeat;  // Last heartbeat of its probe; InfinitePast if none yet.
  int processes = 0;
  double cpu_seconds = 0;  // CPU time used, from the cgroup.
  uint64_t memory_bytes = 0;
};

// What the node has and what sandboxes use, for the node capacity metrics and the controller.
struct NodeUsage {
  double cpu_cores = 0;
  double cpu_cores_allocated = 0;  // Sum of the CPU quotas of live sandboxes.
  uint64_t memory_bytes = 0;
  uint64_t memory_bytes_used = 0;
  uint64_t pids_max = 0;
  uint64_t pids_used = 0;
};

class SandboxBackend {
 public:
  virtual ~SandboxBackend() = default;

  // Makes a sandbox: namespaces, read-only root from spec.root_dir, tmpfs /tmp and /workspace,
  // cgroup with spec.limits, the policy's seccomp filter and egress, and its probe. Returns once
  // a command can run in it.
  // Errors: InvalidArgument (bad policy or limits: the caller's fault), AlreadyExists (id in
  // use), ResourceExhausted (node full), Internal/Unavailable (the kernel said no; the backend
  // has already cleaned whatever it made).
  virtual absl::StatusOr<CreatedSandbox> Create(const SandboxSpec& spec) = 0;

  // Ends a sandbox and everything of it: kills the process tree (commands included; their
  // on_exit runs with signal set), removes the cgroup, unmounts and checks that nothing of it is
  // still mounted, removes the workspace and checks for residue on disk. Idempotent: destroying
  // an unknown or already destroyed id returns an empty, clean report. Errors only if cleanup
  // could not even be attempted (Internal); partial failures are in report.residue.
  virtual absl::StatusOr<CleanupReport> Destroy(absl::string_view id) = 0;

  // Starts `request` in the sandbox and returns an id for the command (unique per backend).
  // Returns when the command has started or failed to; output and exit come via `callbacks`.
  // Errors: NotFound (no such sandbox), FailedPrecondition (sandbox dead or being destroyed),
  // InvalidArgument (cwd not absolute, empty command), ResourceExhausted (pids limit).
  virtual absl::StatusOr<std::string> Exec(absl::string_view id, const ExecRequest& request,
                                           ExecCallbacks callbacks) = 0;

  // Interrupts a running command: SIGINT to its process group, SIGKILL to its whole tree after
  // `grace`. on_exit then reports interrupted. Errors: NotFound (no such sandbox or command);
  // interrupting a command that already exited is OK.
  virtual absl::Status Interrupt(absl::string_view id, absl::string_view command_id,
                                 absl::Duration grace) = 0;

  // Reads a command's output again after its accepts_more said false. Harmless for a command
  // that is not held or has ended (or an unknown one): a consumer may call it whenever it has
  // caught up. Never call it from inside a callback of the same command. Backends that never
  // hold output (no accepts_more support) need not override it.
  virtual void ResumeOutput(absl::string_view id, absl::string_view command_id) {}

  // Files inside the sandbox's /workspace. `path` is a path inside the sandbox: absolute under
  // /workspace, or relative to it. The backend resolves it within the workspace only (no "..",
  // no symlink leads out: openat2 RESOLVE_IN_ROOT in the real one). Errors for all of them:
  // NotFound (sandbox or file), InvalidArgument (path outside /workspace, NUL bytes),
  // FailedPrecondition (a directory where a file is needed or the reverse), ResourceExhausted
  // (workspace quota).
  //
  // ReadFile reads up to `length` bytes from `offset` (for HTTP Range); a read past the end
  // returns what there is (maybe nothing). OpenFile opens a regular file for reading; both refuse
  // anything else (FailedPrecondition: a directory, FIFO, socket or device).
  virtual absl::StatusOr<std::string> ReadFile(absl::string_view id, absl::string_view path,
                                               uint64_t offset, uint64_t length) = 0;
  virtual absl::StatusOr<OpenedFile> OpenFile(absl::string_view id, absl::string_view path) = 0;
  // Creates or replaces a file (parent directories are created) with `mode` permission bits.
  virtual absl::Status WriteFile(absl::string_view id, absl::string_view path,
                                 absl::string_view data, uint32_t mode) = 0;
  // Follows symlinks (inside the sandbox); a link that leads nowhere is described itself.
  virtual absl::StatusOr<FileInfo> Stat(absl::string_view id, absl::string_view path) = 0;
  // The entries directly in a directory, sorted by path.
  virtual absl::StatusOr<std::vector<FileInfo>> List(absl::string_view id,
                                                     absl::string_view path) = 0;
  virtual absl::Status MakeDirectory(absl::string_view id, absl::string_view path) = 0;
  // Renames within the workspace; replaces an existing file at `to`.
  virtual absl::Status Move(absl::string_view id, absl::string_view from, absl::string_view to) = 0;
  // Sets the permission bits (mode & 0777) of what `path` leads to.
  virtual absl::Status SetMode(absl::string_view id, absl::string_view path, uint32_t mode) = 0;
  // Removes a file, symlink (never what it points to), or a directory with its contents.
  virtual absl::Status Remove(absl::string_view id, absl::string_view path) = 0;

  // Freezes every process of the sandbox where it is (cgroup freezer, v1 or v2), or thaws it.
  // Errors: NotFound, FailedPrecondition (no freezer), Unavailable (did not settle in time).
  virtual absl::Status Pause(absl::string_view id) = 0;
  virtual absl::Status Resume(absl::string_view id) = 0;

  // Health of one sandbox, read from outside it (its probe and cgroup). Errors: NotFound.
  virtual absl::StatusOr<SandboxHealth> Probe(absl::string_view id) = 0;

  // Can the node make sandboxes at all (cgroups mounted and writable, state dir usable)? For
  // /health. Errors: Unavailable, with what is wrong and what to do.
  virtual absl::Status CheckNode() = 0;
  virtual NodeUsage Usage() = 0;

  // At agent start: finds what a crashed agent left behind (processes, cgroups, mounts,
  // workspaces named after sandbox ids under the state dir) and removes it.
  virtual absl::StatusOr<CleanupReport> CleanLeftovers() = 0;

  // Sandboxes that outlive their agent (docs/agent.md). Adopt, at start and before
  // CleanLeftovers: takes over the sandboxes a previous agent released or lost and that still
  // wait for one; the rest is left to CleanLeftovers. Reattach: the adopted command's callbacks;
  // the output kept since it started is delivered first, then what comes (or its exit).
  // Release, at stop: lets go of every sandbox without ending it. Backends that cannot keep
  // sandboxes across agents adopt nothing and release by destroying.
  virtual absl::StatusOr<std::vector<AdoptedSandboxInfo>> Adopt() {
    return std::vector<AdoptedSandboxInfo>();
  }
  virtual absl::Status Reattach(absl::string_view id, absl::string_view command_id,
                                ExecCallbacks callbacks) {
    return absl::NotFoundError(absl::StrCat("no adopted command \"", command_id, "\" in ", id));
  }
  virtual void Release() {}
};

// Sandbox ids: "sb-" and 1..61 lower-case letters, digits or dashes. They become parts of paths
// and cgroup names, so nothing else (no "/", no ".", no upper case) is ever accepted.
bool IsValidSandboxId(absl::string_view id);

}  // namespace moat::agent
