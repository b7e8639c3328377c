// An in-memory SandboxBackend for tests: no kernel work, deterministic, with knobs to inject
// failures. Commands are not run: a handler (settable) turns a request into output and an exit;
// the default one understands "echo TEXT" and "exit N" and fails everything else with 127.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "node-agent/backend/backend.h"

namespace moat::agent {

// A fake command that runs on its own thread (see FakeBackend::SetProcessScript): it writes
// output as it goes and can wait to be interrupted, killed (Destroy) or timed out.
class FakeProcess {
 public:
  FakeProcess(ExecCallbacks callbacks, absl::Time deadline)
      : callbacks_(std::move(callbacks)), deadline_(deadline) {}
  void Stdout(absl::string_view chunk);
  void Stderr(absl::string_view chunk);
  // Waits until the command is interrupted, killed or past its timeout, or `d` passes; true if
  // it was ended by one of them (the script should then return).
  bool WaitEnded(absl::Duration d);

  // For the backend.
  enum class Ending { kNone, kInterrupted, kKilled, kTimedOut };
  void End(Ending how);
  Ending ending() const;
  const ExecCallbacks& callbacks() const { return callbacks_; }

 private:
  const ExecCallbacks callbacks_;
  const absl::Time deadline_;
  mutable absl::Mutex mu_;
  Ending ending_ ABSL_GUARDED_BY(mu_) = Ending::kNone;
};

class FakeBackend final : public SandboxBackend {
 public:
  struct FakeOutput {
    std::string out;
    std::string err;
    int exit_code = 0;
    bool cpu_timed_out = false;
    // ExecExit's figures; nullopt: not readable.
    std::optional<absl::Duration> cpu;
    std::optional<uint64_t> peak_memory_bytes;
  };
  using ExecHandler = std::function<FakeOutput(const ExecRequest&)>;
  // A long-running command: runs on a thread of its own, returns the exit code.
  using ProcessScript = std::function<int(const ExecRequest&, FakeProcess&)>;

  FakeBackend();
  ~FakeBackend() override;  // Delivers every queued callback, then stops the worker.

  absl::StatusOr<CreatedSandbox> Create(const SandboxSpec& spec) override;
  absl::StatusOr<CleanupReport> Destroy(absl::string_view id) override;
  absl::StatusOr<std::string> Exec(absl::string_view id, const ExecRequest& request,
                                   ExecCallbacks callbacks) override;
  absl::Status Interrupt(absl::string_view id, absl::string_view command_id,
                         absl::Duration grace) override;
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

  // Knobs and observations for tests.
  void FailNextCreate(absl::Status status);
  // Every Create fails with `status` until this is called again with OkStatus().
  void FailCreates(absl::Status status);
  // Create waits `wait` (real time, without holding the fake's lock) and reports `reported` as
  // its start_duration (default 1 ms, no wait).
  void SetCreateTiming(absl::Duration reported, absl::Duration wait = absl::ZeroDuration());
  // A dead sandbox stays (Destroy still cleans it) but Probe reports alive = false.
  void SetAlive(absl::string_view id, bool alive);
  // What Probe reports of the sandbox's cgroup.
  void SetSandboxUsage(absl::string_view id, double cpu_seconds, uint64_t memory_bytes);
  void FailNextDestroy(absl::Status status);
  // The next Destroy that finds its sandbox reports this residue (and forgets the sandbox).
  void SetNextDestroyResidue(std::vector<std::string> residue);
  void SetNodeStatus(absl::Status status);
  void SetUsage(const NodeUsage& usage);
  void SetExecHandler(ExecHandler handler);
  // When set, Exec runs commands with this script instead of the handler (null: handler again).
  void SetProcessScript(ProcessScript script);
  int running_processes() const;                   // Scripted commands that have not exited yet.
  void AddLeftovers(const CleanupReport& report);  // What CleanLeftovers will "find".
  // A FIFO at `path`: Stat describes it (type kOther); ReadFile and OpenFile refuse it.
  void AddSpecialFile(absl::string_view id, absl::string_view path);
  // What the next Adopt returns (its sandboxes must exist: Create them first).
  void SetAdoptable(std::vector<AdoptedSandboxInfo> adoptable) {
    absl::MutexLock lock(&mu_);
    adoptable_ = std::move(adoptable);
  }
  absl::StatusOr<std::vector<AdoptedSandboxInfo>> Adopt() override {
    absl::MutexLock lock(&mu_);
    return std::move(adoptable_);
  }
  bool Exists(absl::string_view id) const;
  bool Paused(absl::string_view id) const;
  SandboxSpec SpecOf(absl::string_view id) const;  // Empty spec if unknown.
  int live_sandboxes() const;
  std::vector<std::string> ids() const;  // Of the live sandboxes, sorted.
  int max_live_sandboxes() const;        // The most that ever existed at once.
  int create_calls() const;              // Create calls, failed ones included.
  // Until `n` Create calls have begun (a slow one may still be running); false on timeout.
  bool WaitCreateCalls(int n, absl::Duration timeout) const;
  void WaitIdle();  // Until every queued callback has run.

 private:
  struct File {
    std::string data;
    uint32_t mode = 0644;
  };
  struct Sandbox {
    SandboxSpec spec;
    std::map<std::string, File> files;  // Relative path under /workspace -> content.
    std::set<std::string> dirs;         // Relative paths of directories ("" is the root).
    std::set<std::string> specials;     // Relative paths of FIFOs.
    bool alive = true;
    bool paused = false;
    double cpu_seconds = 0;
    uint64_t memory_bytes = 0;
  };

  absl::StatusOr<Sandbox*> FindLocked(absl::string_view id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop();

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Sandbox> sandboxes_ ABSL_GUARDED_BY(mu_);
  absl::Status next_create_status_ ABSL_GUARDED_BY(mu_);
  absl::Status create_status_ ABSL_GUARDED_BY(mu_);
  absl::Duration create_reported_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(1);
  absl::Duration create_wait_ ABSL_GUARDED_BY(mu_);
  int create_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<AdoptedSandboxInfo> adoptable_ ABSL_GUARDED_BY(mu_);
  int max_live_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status next_destroy_status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> next_destroy_residue_ ABSL_GUARDED_BY(mu_);
  absl::Status node_status_ ABSL_GUARDED_BY(mu_);
  NodeUsage usage_ ABSL_GUARDED_BY(mu_);
  ExecHandler handler_ ABSL_GUARDED_BY(mu_);
  ProcessScript script_ ABSL_GUARDED_BY(mu_);
  // Scripted commands: backend command id -> (sandbox id, process), while they run.
  std::map<std::string, std::pair<std::string, std::shared_ptr<FakeProcess>>> processes_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> process_threads_ ABSL_GUARDED_BY(mu_);
  CleanupReport leftovers_ ABSL_GUARDED_BY(mu_);
  int next_command_ ABSL_GUARDED_BY(mu_) = 1;
  // Callbacks run on one worker thread, in order, as the contract requires (never inside Exec).
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread worker_;
};

}  // namespace moat::agent
