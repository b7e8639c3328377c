// Bookkeeping of the per-sandbox API's commands: what runs or ran in each sandbox, its state and
// its output, cleaned as `moat run --json` cleans it, in bounded memory.
//
// A command's life (the backend's callbacks drive it):
//
//   Add ──▶ running ──on_exit──▶ exited ──(K newer finished ones, or ForgetSandbox)──▶ forgotten
//
// Output cleaning is chunk-wise (the stream is shown while it comes) with the guarantees of
// sandbox::SanitizeOutput: escape and control sequences removed and valid UTF-8 (TerminalFilter,
// whose result does not depend on the chunking), secrets masked (MaskSecrets, per complete
// line: a secret never spans lines, so line by line finds what the whole text would), and a
// mostly binary chunk replaced by the binary placeholder. A line longer than
// max_line_bytes is cut and masked as cut text (a token cut at the end is masked too).
//
// What is kept of a command's output (KeptOutput):
//   kNewest  at most max_log_bytes of cleaned lines, both streams together; the oldest lines are
//            dropped and readers are told "[moat: N bytes dropped]" (execd's commands: a
//            background command is polled for what it does now);
//   kFirst   each stream's first max_log_bytes, as `moat run --json` keeps them (its first
//            max_log_bytes raw bytes, cleaned, and cut again to max_log_bytes); the rest is
//            not kept and the stream is marked truncated. Nothing is dropped once kept, so
//            the result does not depend on how fast a reader reads (POST /v1/run's commands).
// Backpressure (kNewest): while a live reader is attached (the SSE stream of a foreground run,
// AttachReader before the command starts), lines it has not read are not dropped. Once it is more
// than max_log_bytes behind, AcceptsMore (the backend's accepts_more) says no and the backend
// stops reading the command's pipes, so the command blocks as under OpenSandbox's execd; when
// the reader is back within half of that (ReaderAt) or goes (DetachReader), `resume` is called
// and reading goes on. Memory stays bounded either way: unread lines past 2 * max_log_bytes
// (what a command's end drains from its pipes while held) are dropped even then.
//
//   no reader ──AttachReader──▶ attached ──behind > max──▶ held ──within max/2, or Detach──▶
//   (drop oldest)               (keep unread)              (pipes not read)        resume()
//
// Plus a partial line of at most max_line_bytes per stream; per sandbox at most
// max_finished_per_sandbox finished commands and max_running_per_sandbox running ones.
//
// Violations (AddViolation) are the sandbox's, while the command runs, in `moat run`'s words:
// at most kMaxViolations of each group (network denials; the rest), as the supervisor and the
// egress session cap theirs.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node-agent/backend/backend.h"
#include "sandbox/output/result.h"
#include "sandbox/output/sanitizer.h"
#include "util/clock.h"

namespace moat::agent {

struct CommandTableOptions {
  size_t max_log_bytes = 1 << 20;  // Cleaned output kept per command.
  size_t max_line_bytes = 64 << 10;
  size_t max_finished_per_sandbox = 64;
  size_t max_running_per_sandbox = 64;
};

enum class OutputStream { kStdout, kStderr };
enum class KeptOutput { kNewest, kFirst };
inline constexpr size_t kMaxViolations = 64;  // per group, as sandbox/supervisor.h's default

// One stream's cleaner: raw chunks in, cleaned complete lines out.
class StreamCleaner {
 public:
  explicit StreamCleaner(size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}
  // Cleaned text that can be shown now: complete lines ("...\n"), or a cut overlong line.
  std::string Feed(absl::string_view raw);
  // At the end of the stream: the rest, a partial last line without "\n". `cut`: the input was
  // cut short (a partial character at the end is dropped, a token cut there masked).
  std::string Finish(bool cut = false);

 private:
  std::string TakeLines(bool all, bool cut = false);

  size_t max_line_bytes_;
  sandbox::TerminalFilter filter_;
  std::string pending_;  // Filtered, not yet masked: the current partial line.
};

// A piece of cleaned output: one line (ending in "\n" except maybe the last of a stream).
struct OutputLine {
  OutputStream stream = OutputStream::kStdout;
  std::string text;
};

// What a reader gets from Command::Read.
struct OutputBatch {
  std::vector<OutputLine> lines;
  uint64_t dropped_bytes = 0;  // Bytes of lines the reader missed (dropped for memory).
  uint64_t next_line = 0;      // Pass back to read on.
  bool finished = false;       // The command has exited and every line was read.
};

struct CommandStatus {
  std::string id;
  std::string command;
  bool background = false;
  bool running = true;
  std::optional<int> exit_code;  // Set once exited; 128+N when killed by signal N.
  std::string error;             // Why it did not end normally (timeout, signal, start failure).
  absl::Time started;
  absl::Time finished = absl::InfiniteFuture();
  ExecExit exit;  // The backend's report, once exited.
  // kFirst: a stream's output went past what is kept.
  bool stdout_truncated = false, stderr_truncated = false;
  // What the sandbox did against its policy while the command ran (seccomp, network, ...), in
  // the order reported; beyond kMaxViolations of the non-network ones, counted here.
  std::vector<sandbox::Violation> violations;
  uint64_t violations_dropped = 0;
};

// What ended it, as `moat run --json`'s status: "running", "exited", "signaled", "timed_out",
// "cpu_timeout", "interrupted", "oom_killed", or "failed_to_start".
std::string StatusName(const CommandStatus& status);

// One command. Thread-safe: the backend's callbacks write, API handlers read.
class Command {
 public:
  Command(std::string id, std::string sandbox_id, std::string command, bool background,
          absl::Time started, const CommandTableOptions& options,
          KeptOutput kept = KeptOutput::kNewest);

  const std::string& id() const { return id_; }
  const std::string& sandbox_id() const { return sandbox_id_; }

  // The backend's id for Interrupt; empty until Exec has returned.
  void SetBackendId(std::string backend_id);
  std::string backend_id() const;

  // From the backend's callbacks (never concurrently for one command, as backend.h promises).
  void AppendOutput(OutputStream stream, absl::string_view raw);
  void Finish(const ExecExit& exit, absl::Time now);
  // The command never started (Exec failed).
  void FailToStart(absl::string_view error, absl::Time now);
  // A violation of its sandbox while it runs (ignored once it has finished).
  void AddViolation(absl::string_view kind, absl::string_view detail);

  CommandStatus Status() const;
  bool running() const;

  // Backpressure (kNewest only; see above). AttachReader: a reader from line 0 on, before the
  // command starts. SetResume: what reads the command's pipes again (the backend's ResumeOutput),
  // once its backend id is known; called at once if a hold ended before. ReaderAt: the reader
  // has had every line before `line`. DetachReader: it is gone (the command must not stay held).
  void AttachReader();
  void SetResume(std::function<void()> resume);
  bool AcceptsMore();
  void ReaderAt(uint64_t line);
  void DetachReader();

  // Lines from absolute line index `from` on; waits up to `timeout` for at least one line or the
  // end. Lines before the oldest kept one are reported in dropped_bytes (`consumed_bytes`: how
  // many bytes of output the reader has had, to say how many it missed).
  OutputBatch Read(uint64_t from, uint64_t consumed_bytes, absl::Duration timeout) const;
  // Everything kept from line `from` on, as text for the logs endpoint; `next_line` is set to the
  // index after the last line.
  std::string LogText(uint64_t from, uint64_t* next_line) const;
  // Total cleaned bytes before line `line` that a reader starting at 0 would have had (for
  // consumed_bytes); lines no longer kept count as the oldest kept one's offset.
  uint64_t OffsetOf(uint64_t line) const;

 private:
  void AddLinesLocked(OutputStream stream, absl::string_view text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kFirst: keeps what fits of `text` in the stream's max_log_bytes.
  void AddFirstLinesLocked(OutputStream stream, absl::string_view text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StoreLineLocked(OutputStream stream, absl::string_view line)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kNewest: drops the oldest lines past max_log_bytes, but not those an attached reader has
  // not read (unless they pass 2 * max_log_bytes).
  void DropOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cleaned bytes stored after the attached reader's position.
  uint64_t UnreadBytesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string id_;
  const std::string sandbox_id_;
  const CommandTableOptions options_;
  const KeptOutput kept_;

  mutable absl::Mutex mu_;
  // Locking: mu_ guards everything below; cleaners are used only by the backend's callbacks,
  // but under mu_ too, so that Finish sees them settled.
  StreamCleaner out_cleaner_ ABSL_GUARDED_BY(mu_);
  StreamCleaner err_cleaner_ ABSL_GUARDED_BY(mu_);
  std::string backend_id_ ABSL_GUARDED_BY(mu_);
  CommandStatus status_ ABSL_GUARDED_BY(mu_);
  struct Stored {
    OutputLine line;
    uint64_t offset;  // Cleaned bytes of the command before this line.
  };
  std::deque<Stored> lines_ ABSL_GUARDED_BY(mu_);
  uint64_t first_line_ ABSL_GUARDED_BY(mu_) = 0;  // Absolute index of lines_.front().
  uint64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // kFirst, per stream (index: OutputStream): raw bytes taken, cleaned bytes kept, and whether
  // the stream was cut (nothing more of it is kept).
  uint64_t raw_taken_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  uint64_t first_kept_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  bool cut_[2] ABSL_GUARDED_BY(mu_) = {false, false};
  bool reader_attached_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t reader_line_ ABSL_GUARDED_BY(mu_) = 0;  // Absolute index of its next line.
  bool held_ ABSL_GUARDED_BY(mu_) = false;         // AcceptsMore said no; no resume since.
  std::function<void()> resume_ ABSL_GUARDED_BY(mu_);
  uint64_t network_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  size_t network_kept_ ABSL_GUARDED_BY(mu_) = 0;
};

// The commands of every sandbox. Thread-safe.
class CommandTable {
 public:
  CommandTable(CommandTableOptions options, const Clock* clock);

  // A new running command in `sandbox_id`. ResourceExhausted if the sandbox already runs
  // max_running_per_sandbox commands. Drops the oldest finished commands past the limit.
  absl::StatusOr<std::shared_ptr<Command>> Add(absl::string_view sandbox_id,
                                               absl::string_view command, bool background,
                                               KeptOutput kept = KeptOutput::kNewest);
  // A running command carried over from a previous agent (re-adoption), with its id and start.
  std::shared_ptr<Command> Restore(absl::string_view sandbox_id, std::string id,
                                   std::string command, bool background, absl::Time started);
  // NotFound unless `id` is a command of `sandbox_id` (one sandbox never sees another's).
  absl::StatusOr<std::shared_ptr<Command>> Find(absl::string_view sandbox_id,
                                                absl::string_view id) const;
  // Drops the oldest finished commands of the sandbox beyond max_finished_per_sandbox (call it
  // when one finishes).
  void Prune(absl::string_view sandbox_id);
  // A violation of the sandbox: every command of it that runs gets it (Command::AddViolation).
  void AddViolation(absl::string_view sandbox_id, absl::string_view kind, absl::string_view detail);
  // Forgets every command of the sandbox (it was deleted). Streams that hold a command keep it.
  void ForgetSandbox(absl::string_view sandbox_id);
  // Running commands of the sandbox.
  int RunningIn(absl::string_view sandbox_id) const;
  size_t size() const;  // Commands known, all sandboxes.
  std::vector<std::string> Sandboxes() const;

  const Clock* clock() const { return clock_; }

 private:
  // Leaves at most `keep` finished commands.
  void PruneLocked(absl::string_view sandbox_id, size_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CommandTableOptions options_;
  const Clock* clock_;
  mutable absl::Mutex mu_;
  // sandbox id -> its commands, oldest first.
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<Command>>> by_sandbox_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::agent
