#include "node-agent/backend/fake_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "node-agent/backend/workspace_path.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::agent {
namespace {

FakeBackend::FakeOutput DefaultHandler(const ExecRequest& request) {
  absl::string_view cmd = request.command;
  if (absl::ConsumePrefix(&cmd, "echo ")) return {absl::StrCat(cmd, "\n"), "", 0};
  int code = 0;
  if (absl::ConsumePrefix(&cmd, "exit ") && absl::SimpleAtoi(cmd, &code)) return {"", "", code};
  return {"", absl::StrCat("sh: ", request.command, ": not found\n"), 127};
}

std::string SandboxPath(absl::string_view rel) {
  return rel.empty() ? "/workspace" : absl::StrCat("/workspace/", rel);
}

std::string ParentOf(absl::string_view rel) {
  size_t slash = rel.rfind('/');
  return slash == absl::string_view::npos ? "" : std::string(rel.substr(0, slash));
}

}  // namespace

void FakeProcess::Stdout(absl::string_view chunk) {
  if (callbacks_.on_stdout) callbacks_.on_stdout(chunk);
}

void FakeProcess::Stderr(absl::string_view chunk) {
  if (callbacks_.on_stderr) callbacks_.on_stderr(chunk);
}

bool FakeProcess::WaitEnded(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  absl::Time until = std::min(absl::Now() + d, deadline_);
  mu_.AwaitWithDeadline(absl::Condition(
                            +[](Ending* e) { return *e != Ending::kNone; }, &ending_),
                        until);
  if (ending_ == Ending::kNone && absl::Now() >= deadline_) ending_ = Ending::kTimedOut;
  return ending_ != Ending::kNone;
}

void FakeProcess::End(Ending how) {
  absl::MutexLock lock(&mu_);
  if (ending_ == Ending::kNone) ending_ = how;
}

FakeProcess::Ending FakeProcess::ending() const {
  absl::MutexLock lock(&mu_);
  return ending_;
}

FakeBackend::FakeBackend() : handler_(DefaultHandler), worker_([this] { WorkerLoop(); }) {}

FakeBackend::~FakeBackend() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [unused, process] : processes_) process.second->End(FakeProcess::Ending::kKilled);
    threads = std::move(process_threads_);
  }
  for (std::thread& t : threads) t.join();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.join();
}

void FakeBackend::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](FakeBackend* self)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopping_ || !self->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping_ and nothing left to deliver.
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    task();
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

void FakeBackend::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](FakeBackend* self)
           ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->queue_.empty() && self->running_ == 0; },
      this));
}

absl::StatusOr<FakeBackend::Sandbox*> FakeBackend::FindLocked(absl::string_view id) {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return absl::NotFoundError(absl::StrCat("no sandbox \"", id, "\""));
  return &it->second;
}

absl::StatusOr<CreatedSandbox> FakeBackend::Create(const SandboxSpec& spec) {
  absl::Duration wait;
  {
    absl::MutexLock lock(&mu_);
    ++create_calls_;
    wait = create_wait_;
  }
  if (wait > absl::ZeroDuration()) absl::SleepFor(wait);  // Like a slow kernel, unlocked.
  absl::MutexLock lock(&mu_);
  if (!next_create_status_.ok()) return std::exchange(next_create_status_, absl::OkStatus());
  if (!create_status_.ok()) return create_status_;
  if (!IsValidSandboxId(spec.id)) return absl::InvalidArgumentError("invalid sandbox id");
  if (sandboxes_.contains(spec.id)) {
    return absl::AlreadyExistsError(absl::StrCat("sandbox \"", spec.id, "\" exists"));
  }
  Sandbox& box = sandboxes_[spec.id];
  box.spec = spec;
  box.dirs.insert("");
  max_live_ = std::max(max_live_, static_cast<int>(sandboxes_.size()));
  return CreatedSandbox{StartPath::kCold, create_reported_};
}

absl::StatusOr<CleanupReport> FakeBackend::Destroy(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  if (!next_destroy_status_.ok()) return std::exchange(next_destroy_status_, absl::OkStatus());
  CleanupReport report;
  for (auto& [unused, process] : processes_) {
    if (process.first == id) process.second->End(FakeProcess::Ending::kKilled);
  }
  if (sandboxes_.erase(id) == 1) {
    report.processes_killed = 1;  // Its init.
    report.cgroups_removed = 1;
    report.mounts_unmounted = 3;  // root, /tmp, /workspace.
    report.workspaces_removed = 1;
    report.residue = std::exchange(next_destroy_residue_, {});
  }
  return report;
}

absl::StatusOr<std::string> FakeBackend::Exec(absl::string_view id, const ExecRequest& request,
                                              ExecCallbacks callbacks) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(FindLocked(id).status());
  if (absl::StripAsciiWhitespace(request.command).empty()) {
    return absl::InvalidArgumentError("empty command; give a shell command to run");
  }
  if (!request.cwd.empty() && request.cwd[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("cwd \"", request.cwd, "\" is not absolute; give an absolute path"));
  }
  if (script_) {
    std::string command_id = absl::StrCat("cmd-", next_command_++);
    auto process = std::make_shared<FakeProcess>(std::move(callbacks),
                                                 request.timeout == absl::InfiniteDuration()
                                                     ? absl::InfiniteFuture()
                                                     : absl::Now() + request.timeout);
    processes_[command_id] = {std::string(id), process};
    process_threads_.emplace_back([this, script = script_, request, process, command_id] {
      int code = script(request, *process);
      ExecExit exit;
      exit.exit_code = code;
      exit.duration = absl::Milliseconds(1);
      switch (process->ending()) {
        case FakeProcess::Ending::kNone:
          break;
        case FakeProcess::Ending::kInterrupted:
          exit.interrupted = true;
          exit.signal = 2;
          break;
        case FakeProcess::Ending::kKilled:
          exit.signal = 9;
          break;
        case FakeProcess::Ending::kTimedOut:
          exit.timed_out = true;
          exit.signal = 9;
          break;
      }
      if (process->callbacks().on_exit) process->callbacks().on_exit(exit);
      absl::MutexLock lock(&mu_);
      processes_.erase(command_id);
    });
    return command_id;
  }
  FakeOutput output = handler_(request);
  queue_.push_back([output = std::move(output), callbacks = std::move(callbacks)] {
    if (!output.out.empty() && callbacks.on_stdout) callbacks.on_stdout(output.out);
    if (!output.err.empty() && callbacks.on_stderr) callbacks.on_stderr(output.err);
    ExecExit exit;
    exit.exit_code = output.exit_code;
    exit.duration = absl::Milliseconds(1);
    exit.cpu_timed_out = output.cpu_timed_out;
    exit.cpu = output.cpu;
    exit.peak_memory_bytes = output.peak_memory_bytes;
    if (callbacks.on_exit) callbacks.on_exit(exit);
  });
  return absl::StrCat("cmd-", next_command_++);
}

absl::Status FakeBackend::Interrupt(absl::string_view id, absl::string_view command_id,
                                    absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(FindLocked(id).status());
  auto it = processes_.find(std::string(command_id));
  if (it != processes_.end() && it->second.first == id) {
    it->second.second->End(FakeProcess::Ending::kInterrupted);
  }
  // Unscripted fake commands finish at once: any command that was started has already exited.
  return absl::OkStatus();
}

absl::StatusOr<std::string> FakeBackend::ReadFile(absl::string_view id, absl::string_view path,
                                                  uint64_t offset, uint64_t length) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string rel, WorkspaceRelativePath(path));
  if (box->dirs.contains(rel)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", path, "\" is a directory"));
  }
  if (box->specials.contains(rel)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", path, "\" is not a regular file"));
  }
  auto it = box->files.find(rel);
  if (it == box->files.end()) return absl::NotFoundError(absl::StrCat("no file \"", path, "\""));
  const std::string& data = it->second.data;
  if (offset >= data.size()) return std::string();
  return data.substr(offset, length);
}

absl::StatusOr<OpenedFile> FakeBackend::OpenFile(absl::string_view id, absl::string_view path) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string rel, WorkspaceRelativePath(path));
  if (rel.empty() || box->dirs.contains(rel)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", path, "\" is a directory"));
  }
  if (box->specials.contains(rel)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", path, "\" is not a regular file"));
  }
  auto it = box->files.find(rel);
  if (it == box->files.end()) return absl::NotFoundError(absl::StrCat("no file \"", path, "\""));
  // A snapshot in memory: later writes to the fake file do not show, as with a real file
  // replaced by rename while a download holds the old one open.
  UniqueFd fd(::memfd_create("fake-backend-file", MFD_CLOEXEC));
  if (!fd) return ErrnoStatus("memfd_create");
  const std::string& data = it->second.data;
  for (size_t done = 0; done < data.size();) {
    ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0) return ErrnoStatus("write the fake file's snapshot");
    done += static_cast<size_t>(n);
  }
  return OpenedFile{std::move(fd), FileInfo{SandboxPath(rel), false, data.size(), it->second.mode,
                                            absl::UnixEpoch()}};
}

absl::Status FakeBackend::WriteFile(absl::string_view id, absl::string_view path,
                                    absl::string_view data, uint32_t mode) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string rel, WorkspaceRelativePath(path));
  if (rel.empty() || box->dirs.contains(rel)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", path, "\" is a directory"));
  }
  for (std::string dir = ParentOf(rel); !dir.empty(); dir = ParentOf(dir)) box->dirs.insert(dir);
  box->files[rel] = File{std::string(data), mode & 07777};
  return absl::OkStatus();
}

absl::StatusOr<FileInfo> FakeBackend::Stat(absl::string_view id, absl::string_view path) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string rel, WorkspaceRelativePath(path));
  if (box->dirs.contains(rel)) {
    return FileInfo{SandboxPath(rel), true, 0, 0755, absl::UnixEpoch(), FileType::kDirectory};
  }
  if (box->specials.contains(rel)) {
    return FileInfo{SandboxPath(rel), false, 0, 0644, absl::UnixEpoch(), FileType::kOther};
  }
  auto it = box->files.find(rel);
  if (it == box->files.end()) return absl::NotFoundError(absl::StrCat("no file \"", path, "\""));
  return FileInfo{SandboxPath(rel), false, it->second.data.size(), it->second.mode,
                  absl::UnixEpoch()};
}

absl::StatusOr<std::vector<FileInfo>> FakeBackend::List(absl::string_view id,
                                                        absl::string_view path) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string rel, WorkspaceRelativePath(path));
  if (!box->dirs.contains(rel)) {
    return absl::NotFoundError(absl::StrCat("no directory \"", path, "\""));
  }
  std::map<std::string, FileInfo> entries;  // Sorted by path, as the contract says.
  for (const std::string& dir : box->dirs) {
    if (!dir.empty() && ParentOf(dir) == rel) {
      entries[dir] =
          FileInfo{SandboxPath(dir), true, 0, 0755, absl::UnixEpoch(), FileType::kDirectory};
    }
  }
  for (const auto& [file, content] : box->files) {
    if (ParentOf(file) == rel) {
      entries[file] =
          FileInfo{SandboxPath(file), false, content.data.size(), content.mode, absl::UnixEpoch()};
    }
  }
  std::vector<FileInfo> out;
  for (auto& [unused, info] : entries) out.push_back(std::move(info));
  return out;
}

absl::Status FakeBackend::MakeDirectory(absl::string_view id, absl::string_view path) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string rel, WorkspaceRelativePath(path));
  for (std::string dir = rel; !dir.empty(); dir = ParentOf(dir)) {
    if (box->files.contains(dir)) {
      return absl::FailedPreconditionError(absl::StrCat("\"", dir, "\" is a file"));
    }
    box->dirs.insert(dir);
  }
  return absl::OkStatus();
}

absl::Status FakeBackend::SetMode(absl::string_view id, absl::string_view path, uint32_t mode) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string rel, WorkspaceRelativePath(path));
  if (box->dirs.contains(rel)) return absl::OkStatus();  // The fake keeps no directory modes.
  auto it = box->files.find(rel);
  if (it == box->files.end()) return absl::NotFoundError(absl::StrCat("no file \"", path, "\""));
  it->second.mode = mode & 0777;
  return absl::OkStatus();
}

absl::Status FakeBackend::Move(absl::string_view id, absl::string_view from, absl::string_view to) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string src, WorkspaceRelativePath(from));
  ASSIGN_OR_RETURN(std::string dst, WorkspaceRelativePath(to));
  auto it = box->files.find(src);
  // The fake moves files only; directories are not needed by the tests that use it.
  if (it == box->files.end()) return absl::NotFoundError(absl::StrCat("no file \"", from, "\""));
  if (dst.empty() || box->dirs.contains(dst)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", to, "\" is a directory"));
  }
  File file = std::move(it->second);
  box->files.erase(it);
  box->files[dst] = std::move(file);
  return absl::OkStatus();
}

absl::Status FakeBackend::Remove(absl::string_view id, absl::string_view path) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  ASSIGN_OR_RETURN(std::string rel, WorkspaceRelativePath(path));
  if (box->files.erase(rel) == 1) return absl::OkStatus();
  if (rel.empty()) return absl::InvalidArgumentError("cannot remove /workspace itself");
  if (!box->dirs.contains(rel)) return absl::NotFoundError(absl::StrCat("no \"", path, "\""));
  std::string prefix = rel + "/";
  std::erase_if(box->files, [&](const auto& kv) { return absl::StartsWith(kv.first, prefix); });
  std::erase_if(box->dirs,
                [&](const std::string& d) { return d == rel || absl::StartsWith(d, prefix); });
  return absl::OkStatus();
}

absl::Status FakeBackend::Pause(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  box->paused = true;
  return absl::OkStatus();
}

absl::Status FakeBackend::Resume(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  box->paused = false;
  return absl::OkStatus();
}

bool FakeBackend::Paused(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  return it != sandboxes_.end() && it->second.paused;
}

absl::StatusOr<SandboxHealth> FakeBackend::Probe(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Sandbox * box, FindLocked(id));
  return SandboxHealth{box->alive, absl::UnixEpoch(), box->alive ? 1 : 0, box->cpu_seconds,
                       box->memory_bytes};
}

absl::Status FakeBackend::CheckNode() {
  absl::MutexLock lock(&mu_);
  return node_status_;
}

NodeUsage FakeBackend::Usage() {
  absl::MutexLock lock(&mu_);
  return usage_;
}

absl::StatusOr<CleanupReport> FakeBackend::CleanLeftovers() {
  absl::MutexLock lock(&mu_);
  return std::exchange(leftovers_, CleanupReport{});
}

void FakeBackend::FailNextCreate(absl::Status status) {
  absl::MutexLock lock(&mu_);
  next_create_status_ = std::move(status);
}

void FakeBackend::FailCreates(absl::Status status) {
  absl::MutexLock lock(&mu_);
  create_status_ = std::move(status);
}

void FakeBackend::SetCreateTiming(absl::Duration reported, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  create_reported_ = reported;
  create_wait_ = wait;
}

void FakeBackend::SetAlive(absl::string_view id, bool alive) {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  if (it != sandboxes_.end()) it->second.alive = alive;
}

void FakeBackend::FailNextDestroy(absl::Status status) {
  absl::MutexLock lock(&mu_);
  next_destroy_status_ = std::move(status);
}

void FakeBackend::SetSandboxUsage(absl::string_view id, double cpu_seconds, uint64_t memory_bytes) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Sandbox*> box = FindLocked(id);
  if (!box.ok()) return;
  (*box)->cpu_seconds = cpu_seconds;
  (*box)->memory_bytes = memory_bytes;
}

void FakeBackend::AddSpecialFile(absl::string_view id, absl::string_view path) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Sandbox*> box = FindLocked(id);
  absl::StatusOr<std::string> rel = WorkspaceRelativePath(path);
  if (box.ok() && rel.ok()) (*box)->specials.insert(*rel);
}

void FakeBackend::SetNextDestroyResidue(std::vector<std::string> residue) {
  absl::MutexLock lock(&mu_);
  next_destroy_residue_ = std::move(residue);
}

void FakeBackend::SetNodeStatus(absl::Status status) {
  absl::MutexLock lock(&mu_);
  node_status_ = std::move(status);
}

void FakeBackend::SetUsage(const NodeUsage& usage) {
  absl::MutexLock lock(&mu_);
  usage_ = usage;
}

void FakeBackend::SetExecHandler(ExecHandler handler) {
  absl::MutexLock lock(&mu_);
  handler_ = std::move(handler);
}

void FakeBackend::SetProcessScript(ProcessScript script) {
  absl::MutexLock lock(&mu_);
  script_ = std::move(script);
}

int FakeBackend::running_processes() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(processes_.size());
}

void FakeBackend::AddLeftovers(const CleanupReport& report) {
  absl::MutexLock lock(&mu_);
  leftovers_ += report;
}

bool FakeBackend::Exists(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  return sandboxes_.contains(id);
}

SandboxSpec FakeBackend::SpecOf(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? SandboxSpec{} : it->second.spec;
}

int FakeBackend::live_sandboxes() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sandboxes_.size());
}

std::vector<std::string> FakeBackend::ids() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [id, box] : sandboxes_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

int FakeBackend::max_live_sandboxes() const {
  absl::MutexLock lock(&mu_);
  return max_live_;
}

bool FakeBackend::WaitCreateCalls(int n, absl::Duration timeout) const {
  struct Arg {
    const FakeBackend* self;
    int n;
  } arg{this, n};
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->self->create_calls_ >= a->n; },
          &arg),
      timeout);
}

int FakeBackend::create_calls() const {
  absl::MutexLock lock(&mu_);
  return create_calls_;
}

}  // namespace moat::agent
