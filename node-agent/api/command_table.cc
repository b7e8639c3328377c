#include "node-agent/api/command_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "sandbox/output/secret_scanner.h"
#include "util/token.h"

namespace moat::agent {
namespace {

// Below this a chunk is too short to judge: a few bytes of UTF-8 split by a pipe read are not
// "binary".
constexpr size_t kMinBinaryChunk = 64;
// As SanitizeOptions' default: what `moat run --json` uses.
constexpr double kMinPrintableRatio = sandbox::SanitizeOptions{}.min_printable_ratio;

// Bytes that secrets (keys, tokens, URLs with passwords) are made of.
bool IsTokenByte(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("_-+/=.:@%").find(c) != absl::string_view::npos;
}

std::string DroppedMarker(uint64_t bytes) {
  return absl::StrCat("[moat: ", bytes, " bytes dropped]\n");
}

}  // namespace

std::string StreamCleaner::Feed(absl::string_view raw) {
  std::string out;
  if (raw.size() >= kMinBinaryChunk && sandbox::PrintableRatio(raw) < kMinPrintableRatio) {
    // As SanitizeOutput does for a whole stream: binary garbage is not shown at all. What was
    // pending is ended first so the placeholder stands on its own line.
    filter_.FlushTo(&pending_, /*input_was_cut=*/true);
    out = TakeLines(/*all=*/true);
    if (!out.empty() && out.back() != '\n') out += '\n';
    absl::StrAppend(&out, sandbox::BinaryPlaceholder(raw.size(), false), "\n");
    return out;
  }
  filter_.FilterTo(raw, &pending_);
  return TakeLines(/*all=*/false);
}

std::string StreamCleaner::Finish(bool cut) {
  filter_.FlushTo(&pending_, /*input_was_cut=*/cut);
  return TakeLines(/*all=*/true, cut);
}

std::string StreamCleaner::TakeLines(bool all, bool cut) {
  std::string out;
  size_t end = all ? pending_.size() : pending_.rfind('\n');
  if (end != std::string::npos && !all) ++end;
  if (end != std::string::npos && end > 0) {
    out = sandbox::MaskSecrets(absl::string_view(pending_).substr(0, end), cut).text;
    pending_.erase(0, end);
  }
  // A line that never ends is shown in pieces so it cannot hold memory. The cut goes before
  // the last token (a run of bytes a secret can be made of), so no secret is split in two
  // halves that each look harmless; only a single token longer than the limit is cut inside,
  // and that piece is masked as cut text (a secret-looking start is masked).
  while (pending_.size() >= max_line_bytes_) {
    size_t cut = max_line_bytes_;
    while (cut > 0 && IsTokenByte(pending_[cut - 1])) --cut;
    if (cut == 0) {
      cut = max_line_bytes_;
      // Not inside a UTF-8 character (the filter's output is valid UTF-8).
      while (cut > 0 && (static_cast<unsigned char>(pending_[cut]) & 0xC0) == 0x80) --cut;
    }
    absl::StrAppend(
        &out, sandbox::MaskSecrets(absl::string_view(pending_).substr(0, cut), true).text, "\n");
    pending_.erase(0, cut);
  }
  return out;
}

Command::Command(std::string id, std::string sandbox_id, std::string command, bool background,
                 absl::Time started, const CommandTableOptions& options, KeptOutput kept)
    : id_(std::move(id)),
      sandbox_id_(std::move(sandbox_id)),
      options_(options),
      kept_(kept),
      out_cleaner_(options.max_line_bytes),
      err_cleaner_(options.max_line_bytes) {
  status_.id = id_;
  status_.command = std::move(command);
  status_.background = background;
  status_.started = started;
}

void Command::SetBackendId(std::string backend_id) {
  absl::MutexLock lock(&mu_);
  backend_id_ = std::move(backend_id);
}

std::string Command::backend_id() const {
  absl::MutexLock lock(&mu_);
  return backend_id_;
}

void Command::StoreLineLocked(OutputStream stream, absl::string_view line) {
  lines_.push_back(Stored{OutputLine{stream, std::string(line)}, total_bytes_});
  kept_bytes_ += line.size();
  total_bytes_ += line.size();
}

void Command::AddLinesLocked(OutputStream stream, absl::string_view text) {
  if (kept_ == KeptOutput::kFirst) return AddFirstLinesLocked(stream, text);
  while (!text.empty()) {
    size_t nl = text.find('\n');
    size_t len = nl == absl::string_view::npos ? text.size() : nl + 1;
    StoreLineLocked(stream, text.substr(0, len));
    text.remove_prefix(len);
  }
  DropOldestLocked();
}

void Command::DropOldestLocked() {
  // Keep the newest lines: a background command is polled for what it does now. A live reader's
  // unread lines stay (it holds the command instead), up to the hard bound.
  while (kept_bytes_ > options_.max_log_bytes && !lines_.empty()) {
    if (reader_attached_ && first_line_ >= reader_line_ &&
        kept_bytes_ <= 2 * options_.max_log_bytes) {
      break;
    }
    kept_bytes_ -= lines_.front().line.text.size();
    lines_.pop_front();
    ++first_line_;
  }
}

uint64_t Command::UnreadBytesLocked() const {
  const uint64_t end = first_line_ + lines_.size();
  if (lines_.empty() || reader_line_ >= end) return 0;
  const uint64_t from = reader_line_ < first_line_ ? lines_.front().offset
                                                   : lines_[reader_line_ - first_line_].offset;
  return total_bytes_ - from;
}

void Command::AttachReader() {
  absl::MutexLock lock(&mu_);
  if (kept_ != KeptOutput::kNewest) return;  // kFirst keeps a bounded prefix: nothing to hold
  reader_attached_ = true;
  reader_line_ = first_line_;
}

void Command::SetResume(std::function<void()> resume) {
  {
    absl::MutexLock lock(&mu_);
    resume_ = std::move(resume);
    // A hold that ended before the backend id was known: its resume is due now. (A spurious one
    // while held costs one more chunk: the next AcceptsMore holds again.)
    if (held_ || !reader_attached_) return;
    resume = resume_;
  }
  if (resume) resume();
}

bool Command::AcceptsMore() {
  absl::MutexLock lock(&mu_);
  if (!reader_attached_ || !status_.running) return true;
  if (UnreadBytesLocked() <= options_.max_log_bytes) return true;
  held_ = true;
  return false;
}

void Command::ReaderAt(uint64_t line) {
  std::function<void()> resume;
  {
    absl::MutexLock lock(&mu_);
    if (!reader_attached_) return;
    reader_line_ = std::max(reader_line_, line);
    if (!held_ || UnreadBytesLocked() > options_.max_log_bytes / 2) return;
    held_ = false;
    resume = resume_;
  }
  if (resume) resume();  // Outside mu_: the backend takes its own lock.
}

void Command::DetachReader() {
  std::function<void()> resume;
  {
    absl::MutexLock lock(&mu_);
    if (!reader_attached_) return;
    reader_attached_ = false;
    DropOldestLocked();  // Back to the bound of a command nobody reads.
    if (!held_) return;
    held_ = false;
    resume = resume_;
  }
  if (resume) resume();
}

void Command::AddFirstLinesLocked(OutputStream stream, absl::string_view text) {
  const int s = stream == OutputStream::kStdout ? 0 : 1;
  while (!text.empty() && !cut_[s]) {
    size_t nl = text.find('\n');
    size_t len = nl == absl::string_view::npos ? text.size() : nl + 1;
    const uint64_t room = options_.max_log_bytes - first_kept_[s];
    if (len > room) {
      // As SanitizeOutput re-caps cleaned text: on a UTF-8 boundary, the rest not kept.
      len = room;
      while (len > 0 && (static_cast<unsigned char>(text[len]) & 0xC0) == 0x80) --len;
      cut_[s] = true;
    }
    if (len > 0) StoreLineLocked(stream, text.substr(0, len));
    first_kept_[s] += len;
    text.remove_prefix(len);
  }
}

void Command::AppendOutput(OutputStream stream, absl::string_view raw) {
  absl::MutexLock lock(&mu_);
  if (!status_.running) return;
  StreamCleaner& cleaner = stream == OutputStream::kStdout ? out_cleaner_ : err_cleaner_;
  if (kept_ == KeptOutput::kFirst) {
    // As `moat run` collects a stream (BoundedBuffer): its first max_log_bytes raw bytes.
    const int s = stream == OutputStream::kStdout ? 0 : 1;
    if (cut_[s]) return;
    const uint64_t room = options_.max_log_bytes - raw_taken_[s];
    if (raw.size() > room) {
      raw_taken_[s] += room;
      AddLinesLocked(stream, cleaner.Feed(raw.substr(0, room)));
      AddLinesLocked(stream, cleaner.Finish(/*cut=*/true));
      cut_[s] = true;
      return;
    }
    raw_taken_[s] += raw.size();
  }
  AddLinesLocked(stream, cleaner.Feed(raw));
}

void Command::AddViolation(absl::string_view kind, absl::string_view detail) {
  absl::MutexLock lock(&mu_);
  if (!status_.running) return;
  // Two caps, as in `moat run`: the egress session keeps its denials apart from the
  // supervisor's violations and says how many more there were.
  if (kind == "network") {
    if (network_kept_ >= kMaxViolations) {
      ++network_dropped_;
      return;
    }
    ++network_kept_;
  } else if (status_.violations.size() - network_kept_ >= kMaxViolations) {
    ++status_.violations_dropped;
    return;
  }
  status_.violations.push_back({std::string(kind), std::string(detail)});
}

void Command::Finish(const ExecExit& exit, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!status_.running) return;
  if (!cut_[0]) AddLinesLocked(OutputStream::kStdout, out_cleaner_.Finish());
  if (!cut_[1]) AddLinesLocked(OutputStream::kStderr, err_cleaner_.Finish());
  status_.stdout_truncated = cut_[0];
  status_.stderr_truncated = cut_[1];
  if (network_dropped_ > 0) {
    status_.violations.push_back(
        {"network", absl::StrCat(network_dropped_, " more network denials")});
  }
  status_.running = false;
  status_.finished = now;
  status_.exit = exit;
  if (!exit.error.empty()) {
    status_.error = exit.error;
  } else if (exit.oom_killed) {
    status_.exit_code = exit.signal != 0 ? 128 + exit.signal : exit.exit_code;
    status_.error =
        "killed by the OOM killer: the sandbox went over its memory limit (exit status " +
        std::to_string(*status_.exit_code) + ")";
  } else if (exit.signal != 0) {
    status_.exit_code = 128 + exit.signal;
    status_.error = exit.timed_out     ? "timed out: killed when its timeout passed"
                    : exit.interrupted ? absl::StrCat("interrupted (signal ", exit.signal, ")")
                                       : absl::StrCat("killed by signal ", exit.signal);
  } else {
    status_.exit_code = exit.exit_code;
    if (exit.timed_out) status_.error = "timed out";
  }
}

std::string StatusName(const CommandStatus& status) {
  if (status.running) return "running";
  if (!status.exit_code.has_value()) return "failed_to_start";
  if (status.exit.oom_killed) return "oom_killed";
  if (status.exit.timed_out) return "timed_out";
  if (status.exit.cpu_timed_out) return "cpu_timeout";
  if (status.exit.interrupted) return "interrupted";
  if (status.exit.signal != 0) return "signaled";
  return "exited";
}

void Command::FailToStart(absl::string_view error, absl::Time now) {
  ExecExit exit;
  exit.error = std::string(error);
  Finish(exit, now);
}

CommandStatus Command::Status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

bool Command::running() const {
  absl::MutexLock lock(&mu_);
  return status_.running;
}

OutputBatch Command::Read(uint64_t from, uint64_t consumed_bytes, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !status_.running || first_line_ + lines_.size() > from;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  OutputBatch batch;
  uint64_t end = first_line_ + lines_.size();
  if (from < first_line_) {
    uint64_t kept_from = lines_.empty() ? total_bytes_ : lines_.front().offset;
    batch.dropped_bytes = kept_from > consumed_bytes ? kept_from - consumed_bytes : 0;
    from = first_line_;
  }
  if (end > from) batch.lines.reserve(end - from);
  for (uint64_t i = from; i < end; ++i) batch.lines.push_back(lines_[i - first_line_].line);
  batch.next_line = std::max(from, end);
  batch.finished = !status_.running && batch.next_line >= end;
  return batch;
}

std::string Command::LogText(uint64_t from, uint64_t* next_line) const {
  absl::MutexLock lock(&mu_);
  std::string out;
  uint64_t end = first_line_ + lines_.size();
  if (from < first_line_) {
    // Exact when reading from the start; otherwise at most this many were missed.
    absl::StrAppend(&out, DroppedMarker(lines_.empty() ? total_bytes_ : lines_.front().offset));
    from = first_line_;
  }
  for (uint64_t i = from; i < end; ++i) out += lines_[i - first_line_].line.text;
  *next_line = std::max(from, end);
  return out;
}

uint64_t Command::OffsetOf(uint64_t line) const {
  absl::MutexLock lock(&mu_);
  if (line >= first_line_ + lines_.size()) return total_bytes_;
  if (line < first_line_) return lines_.front().offset;
  return lines_[line - first_line_].offset;
}

CommandTable::CommandTable(CommandTableOptions options, const Clock* clock)
    : options_(options), clock_(clock) {}

absl::StatusOr<std::shared_ptr<Command>> CommandTable::Add(absl::string_view sandbox_id,
                                                           absl::string_view command,
                                                           bool background, KeptOutput kept) {
  absl::StatusOr<std::string> token = NewToken();
  if (!token.ok()) return token.status();
  std::string key(sandbox_id);
  absl::MutexLock lock(&mu_);
  // Room for this one when it finishes.
  PruneLocked(key, options_.max_finished_per_sandbox -
                       std::min<size_t>(1, options_.max_finished_per_sandbox));
  std::vector<std::shared_ptr<Command>>& commands = by_sandbox_[key];
  size_t running =
      std::count_if(commands.begin(), commands.end(), [](const auto& c) { return c->running(); });
  if (running >= options_.max_running_per_sandbox) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sandbox ", sandbox_id, " already runs ", running,
                     " commands, the limit; wait for one to end or interrupt one"));
  }
  auto cmd =
      std::make_shared<Command>(absl::StrCat("cmd-", token->substr(0, 24)), key,
                                std::string(command), background, clock_->Now(), options_, kept);
  commands.push_back(cmd);
  return cmd;
}

std::shared_ptr<Command> CommandTable::Restore(absl::string_view sandbox_id, std::string id,
                                               std::string command, bool background,
                                               absl::Time started) {
  std::string key(sandbox_id);
  auto cmd = std::make_shared<Command>(std::move(id), key, std::move(command), background, started,
                                       options_);
  absl::MutexLock lock(&mu_);
  by_sandbox_[key].push_back(cmd);
  return cmd;
}

void CommandTable::Prune(absl::string_view sandbox_id) {
  absl::MutexLock lock(&mu_);
  PruneLocked(sandbox_id, options_.max_finished_per_sandbox);
}

void CommandTable::PruneLocked(absl::string_view sandbox_id, size_t keep) {
  auto it = by_sandbox_.find(sandbox_id);
  if (it == by_sandbox_.end()) return;
  std::vector<std::shared_ptr<Command>>& commands = it->second;
  size_t finished =
      std::count_if(commands.begin(), commands.end(), [](const auto& c) { return !c->running(); });
  // Oldest first: drop the earliest finished ones.
  for (auto c = commands.begin(); c != commands.end() && finished > keep;) {
    if (!(*c)->running()) {
      c = commands.erase(c);
      --finished;
    } else {
      ++c;
    }
  }
}

absl::StatusOr<std::shared_ptr<Command>> CommandTable::Find(absl::string_view sandbox_id,
                                                            absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = by_sandbox_.find(sandbox_id);
  if (it != by_sandbox_.end()) {
    for (const std::shared_ptr<Command>& c : it->second) {
      if (c->id() == id) return c;
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "no command \"", id, "\" in this sandbox; finished commands are forgotten after ",
      options_.max_finished_per_sandbox, " newer ones"));
}

void CommandTable::AddViolation(absl::string_view sandbox_id, absl::string_view kind,
                                absl::string_view detail) {
  absl::MutexLock lock(&mu_);
  auto it = by_sandbox_.find(sandbox_id);
  if (it == by_sandbox_.end()) return;
  for (const std::shared_ptr<Command>& c : it->second) c->AddViolation(kind, detail);
}

void CommandTable::ForgetSandbox(absl::string_view sandbox_id) {
  absl::MutexLock lock(&mu_);
  by_sandbox_.erase(sandbox_id);
}

int CommandTable::RunningIn(absl::string_view sandbox_id) const {
  absl::MutexLock lock(&mu_);
  auto it = by_sandbox_.find(sandbox_id);
  if (it == by_sandbox_.end()) return 0;
  return static_cast<int>(std::count_if(it->second.begin(), it->second.end(),
                                        [](const auto& c) { return c->running(); }));
}

size_t CommandTable::size() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [unused, commands] : by_sandbox_) n += commands.size();
  return n;
}

std::vector<std::string> CommandTable::Sandboxes() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [id, unused] : by_sandbox_) out.push_back(id);
  return out;
}

}  // namespace moat::agent
