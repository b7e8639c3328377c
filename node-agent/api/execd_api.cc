// The command half of the per-sandbox API; files are in execd_api_files.cc.
#include "node-agent/api/execd_api.h"

#include <httplib.h>

#include <map>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "node-agent/api/code_interpreter.h"
#include "node-agent/api/execd_api_internal.h"
#include "node-agent/api/sse_event.h"
#include "util/log.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::agent {
namespace {

using nlohmann::json;
using namespace execd_internal;  // NOLINT: this file's own helpers.

constexpr size_t kMaxCommandBytes = 64 << 10;
constexpr size_t kMaxEnvEntries = 128;
constexpr size_t kMaxEnvNameBytes = 256;
constexpr size_t kMaxEnvValueBytes = 32 << 10;
// Under the sandbox's and the request's env: a command without PATH finds nothing.
constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

using RunRequest = ExecdRunRequest;

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" ", what));
}

// RunCommandRequest of the spec. Fields given as null count as absent.
absl::StatusOr<RunRequest> ParseRunRequest(absl::string_view body) {
  absl::StatusOr<json> doc = ParseBody(body);
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  RunRequest out;
  for (const auto& [key, value] : doc->items()) {
    if (value.is_null()) continue;
    if (key == "command") {
      if (!value.is_string()) return Bad(key, "must be a string");
      out.command = value.get<std::string>();
    } else if (key == "cwd") {
      if (!value.is_string()) return Bad(key, "must be a string (a directory in the sandbox)");
      out.cwd = value.get<std::string>();
    } else if (key == "background" || key == "run_result") {
      if (!value.is_boolean()) return Bad(key, "must be true or false");
      (key == "background" ? out.background : out.run_result) = value.get<bool>();
    } else if (key == "timeout" || key == "cpu_timeout") {
      if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0)) {
        return Bad(key, "must be a whole number of milliseconds, 0 or more");
      }
      uint64_t ms = value.get<uint64_t>();
      constexpr uint64_t kMaxMs = uint64_t{365} * 24 * 3600 * 1000;
      if (ms > kMaxMs) return Bad(key, "is more than a year; give less");
      if (ms > 0) {
        (key == "timeout" ? out.timeout : out.cpu_timeout) =
            absl::Milliseconds(static_cast<int64_t>(ms));
      }
    } else if (key == "uid" || key == "gid") {
      // Ids inside the sandbox's user namespace, which maps one: 0, the sandbox's root (its
      // owner's id on the host). Any other id is unmapped: the kernel could not run as it.
      if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0)) {
        return Bad(key, "must be a whole number, an id inside the sandbox");
      }
      if (value.get<uint64_t>() != 0) {
        return Bad(key, absl::StrCat(value.get<uint64_t>(),
                                     " is not mapped in the sandbox's user namespace, which maps "
                                     "only 0 (the sandbox's root); give 0 or leave it out"));
      }
    } else if (key == "envs") {
      if (!value.is_object()) return Bad(key, "must be an object of strings");
      if (value.size() > kMaxEnvEntries) {
        return Bad(key, absl::StrCat("has more than ", kMaxEnvEntries, " entries"));
      }
      for (const auto& [name, v] : value.items()) {
        if (!v.is_string()) return Bad(absl::StrCat("envs.", name), "must be a string");
        const std::string& text = v.get_ref<const std::string&>();
        if (name.empty() || name.size() > kMaxEnvNameBytes || text.size() > kMaxEnvValueBytes ||
            name.find_first_of(std::string("=\0", 2)) != std::string::npos ||
            text.find('\0') != std::string::npos) {
          return Bad(absl::StrCat("envs.", name),
                     absl::StrCat("needs a name of 1 to ", kMaxEnvNameBytes,
                                  " bytes without '=' or NUL and a value of at most ",
                                  kMaxEnvValueBytes, " bytes without NUL"));
        }
        out.envs[name] = text;
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown field \"", key,
          "\"; allowed: background, command, cpu_timeout, cwd, envs, run_result, timeout"));
    }
  }
  if (out.command.find_first_not_of(" \t\n") == std::string::npos) {
    return Bad("command", "is required and must not be empty");
  }
  if (out.command.size() > kMaxCommandBytes || out.command.find('\0') != std::string::npos) {
    return Bad("command", absl::StrCat("must be at most ", kMaxCommandBytes, " bytes, no NUL"));
  }
  if (!out.cwd.empty()) {
    for (char c : out.cwd) {
      if (static_cast<unsigned char>(c) < 0x20) return Bad("cwd", "contains a control byte");
    }
    // Relative: under /workspace, checked like a file path.
    if (out.cwd[0] != '/') {
      absl::StatusOr<std::string> path = SandboxPath(out.cwd);
      if (!path.ok()) return Bad("cwd", path.status().message());
      out.cwd = *path;
    }
  }
  return out;
}

int64_t UnixMillis(absl::Time t) { return absl::ToUnixMillis(t); }

// The error event that ends a stream of a command that did not exit with 0, or nothing.
std::optional<json> ErrorFor(const CommandStatus& status) {
  if (status.exit_code == 0 && status.error.empty()) return std::nullopt;
  json error;
  if (!status.exit_code.has_value()) {
    error = {{"ename", "CommandStartError"},
             {"evalue", status.error},
             {"traceback", json::array({status.error})}};
  } else {
    // As execd: the exit code is the error's value.
    std::string why =
        status.error.empty() ? absl::StrCat("exit status ", *status.exit_code) : status.error;
    const bool timeout = status.exit.timed_out || status.exit.cpu_timed_out;
    error = {{"ename", timeout ? "CommandTimeout" : "CommandExecError"},
             {"evalue", std::to_string(*status.exit_code)},
             {"traceback", json::array({why})}};
  }
  return error;
}

}  // namespace

// What backend callbacks do besides updating their command: the running state in the
// registry and the latency metric. Callbacks can come after the ExecdApi is gone (the backend
// outlives it); then they do nothing here.
class ExecdApi::Hooks {
 public:
  Hooks(Registry* registry, AgentMetrics* metrics, CommandTable* commands)
      : registry_(registry), metrics_(metrics), commands_(commands) {}

  void Disable() {
    absl::MutexLock lock(&mu_);
    registry_ = nullptr;
    metrics_ = nullptr;
    commands_ = nullptr;
  }

  // The registry has no compare-and-set of states, so a transition can still race with a
  // delete that begins between the read and the write; the recycle then removes the record
  // anyway, and only the state shown for a moment is wrong.
  void Started(const std::string& sandbox_id) {
    absl::MutexLock lock(&mu_);
    if (registry_ == nullptr) return;
    if (in_flight_[sandbox_id]++ == 0)
      Transition(sandbox_id, SandboxState::kReady, SandboxState::kRunning);
  }

  void Exited(const std::string& sandbox_id, std::optional<absl::Duration> duration) {
    absl::MutexLock lock(&mu_);
    if (registry_ == nullptr) return;
    if (duration.has_value() && metrics_ != nullptr) metrics_->ObserveCommand(*duration);
    commands_->Prune(sandbox_id);
    auto it = in_flight_.find(sandbox_id);
    if (it == in_flight_.end()) return;
    if (--it->second == 0) {
      in_flight_.erase(it);
      Transition(sandbox_id, SandboxState::kRunning, SandboxState::kReady);
    }
  }

 private:
  void Transition(const std::string& id, SandboxState from, SandboxState to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    registry_->CompareAndSetState(id, from, to);
  }

  absl::Mutex mu_;
  Registry* registry_ ABSL_GUARDED_BY(mu_);
  AgentMetrics* metrics_ ABSL_GUARDED_BY(mu_);
  CommandTable* commands_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
};

// One SSE response in progress. Its command's live reader (Command::AttachReader) until httplib
// lets go of it: the stream ended, or the client went away (the command must not stay held).
struct ExecdApi::Stream {
  ~Stream() {
    if (command != nullptr) command->DetachReader();
  }
  std::shared_ptr<Command> command;
  std::string code_context;  // A code context's run: its frames become the events.
  bool code_done = false;    // The interpreter's "done" frame came (then execution_complete).
  int64_t code_execution_time = 0;
  std::string code_lost;  // The client found no interpreter: why.
  bool init_sent = false;
  uint64_t next_line = 0;
  uint64_t consumed_bytes = 0;
  absl::Time last_write;
  std::optional<absl::Time> sandbox_gone_since;
};

ExecdApi::ExecdApi(SandboxBackend* backend, Registry* registry, AgentMetrics* metrics,
                   const Clock* clock, ExecdOptions options)
    : backend_(backend),
      registry_(registry),
      clock_(clock),
      options_(std::move(options)),
      commands_(options_.commands, clock),
      hooks_(std::make_shared<Hooks>(registry, metrics, &commands_)) {}

ExecdApi::~ExecdApi() { hooks_->Disable(); }

void ExecdApi::ForgetSandbox(absl::string_view sandbox_id) {
  commands_.ForgetSandbox(sandbox_id);
  // Their interpreters end with the sandbox.
  TakeCodeContexts(sandbox_id, nullptr);
  absl::MutexLock lock(&sessions_mu_);
  sessions_.erase(sandbox_id);
}

namespace {

// A session's run: a new bash that restores the session's variables (exported or not),
// functions and working directory from its state files in the sandbox's /tmp, runs the command
// and saves them again on its way out, whatever way it exits. The command and the state's path
// come in variables, never spliced into the script.
constexpr char kSessionScript[] = R"SH(__moat_c=$MOAT_SESSION_CMD; __moat_s=$MOAT_SESSION_STATE
unset MOAT_SESSION_CMD MOAT_SESSION_STATE MOAT_SESSION_SCRIPT
if [ -f "$__moat_s.vars" ]; then . "$__moat_s.vars" 2>/dev/null; fi
if [ -f "$__moat_s.cwd" ]; then cd "$(cat "$__moat_s.cwd")" 2>/dev/null; fi
if [ -n "$MOAT_SESSION_CWD" ]; then cd "$MOAT_SESSION_CWD" || exit 1; fi
unset MOAT_SESSION_CWD
__moat_save() {
  local rc=$?
  { declare -p | grep -vE '^declare -[a-zA-Z]*r|^declare -[-a-zA-Z]* (BASH[A-Z0-9_]*|FUNCNAME|GROUPS|PIPESTATUS|PPID|SHLVL|UID|EUID|_|RANDOM|SRANDOM|SECONDS|LINENO|HISTCMD|EPOCH[A-Z]*|OPTIND|OPTARG|SHELLOPTS|__moat_[a-z]*)(=|$)'
    declare -f | sed '/^__moat_save ()/,/^}/d'; } > "$__moat_s.vars.tmp" && mv "$__moat_s.vars.tmp" "$__moat_s.vars"
  pwd > "$__moat_s.cwd"
  exit $rc
}
trap __moat_save EXIT
eval "$__moat_c"
)SH";

constexpr size_t kMaxSessionsPerSandbox = 64;

std::string SessionState(const std::string& session) {
  return absl::StrCat("/tmp/.moat-session-", session);
}

}  // namespace

void ExecdApi::RegisterSessionRoutes(httplib::Server& s) {
  s.Post(Route("/session"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    std::string cwd;
    if (!req.body.empty()) {
      absl::StatusOr<json> doc = ParseBody(req.body);
      if (!doc.ok()) return SendStatus(res, doc.status());
      if (!doc->is_object()) return SendError(res, 400, "the body must be a JSON object");
      if (doc->contains("cwd") && !(*doc)["cwd"].is_null()) {
        if (!(*doc)["cwd"].is_string()) {
          return SendError(res, 400, "\"cwd\" must be a string (a directory in the sandbox)");
        }
        cwd = (*doc)["cwd"].get<std::string>();
        if (cwd.empty() || cwd[0] != '/' || cwd.find('\0') != std::string::npos) {
          return SendError(res, 400, "\"cwd\" must be an absolute path in the sandbox");
        }
      }
    }
    // Sessions run bash: a root without it cannot have them.
    absl::StatusOr<FileInfo> bash = backend_->Stat(record->id, "/bin/bash");
    if (!bash.ok() || bash->type != FileType::kFile) {
      return SendError(res, 409,
                       "this sandbox's root has no /bin/bash, which bash sessions run; use "
                       "/command, or a profile whose root has bash");
    }
    absl::StatusOr<std::string> token = NewToken();
    if (!token.ok()) return SendStatus(res, token.status());
    const std::string id = absl::StrCat("session-", token->substr(0, 24));
    {
      absl::MutexLock lock(&sessions_mu_);
      std::map<std::string, std::string>& sessions = sessions_[record->id];
      if (sessions.size() >= kMaxSessionsPerSandbox) {
        return SendError(res, 429,
                         absl::StrCat("this sandbox has ", kMaxSessionsPerSandbox,
                                      " bash sessions, the limit; delete one first"));
      }
      sessions[id] = cwd;
    }
    SendJson(res, json{{"session_id", id}});
  });
  s.Post(Route("/session/([^/]+)/run"),
         [this](const httplib::Request& req, httplib::Response& res) { RunInSession(req, res); });
  s.Delete(Route("/session/([^/]+)"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    const std::string id = req.matches[2].str();
    {
      absl::MutexLock lock(&sessions_mu_);
      auto it = sessions_.find(record->id);
      if (it == sessions_.end() || it->second.erase(id) == 0) {
        return SendError(res, 404, absl::StrCat("no bash session \"", id, "\" in this sandbox"));
      }
    }
    for (const char* suffix : {".vars", ".cwd"}) {
      backend_->Remove(record->id, SessionState(id) + suffix).IgnoreError();
    }
    res.status = 200;
  });
}

void ExecdApi::RunInSession(const httplib::Request& req, httplib::Response& res) {
  const std::string sandbox = req.matches[1].str();
  const std::string id = req.matches[2].str();
  std::string session_cwd;
  {
    absl::MutexLock lock(&sessions_mu_);
    auto it = sessions_.find(sandbox);
    auto found = it == sessions_.end() ? decltype(it->second.end())() : it->second.find(id);
    if (it == sessions_.end() || found == it->second.end()) {
      // Authentication first: an unknown session and a wrong token must not be told apart.
      absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
      if (!record.ok()) return SendStatus(res, record.status());
      return SendError(res, 404,
                       absl::StrCat("no bash session \"", id,
                                    "\" in this sandbox; "
                                    "create one with POST /session"));
    }
    session_cwd = found->second;
  }
  absl::StatusOr<RunRequest> request = ParseRunRequest(req.body);
  if (!request.ok()) return SendStatus(res, request.status());
  if (request->command.empty()) return SendError(res, 400, "\"command\" is required");
  const std::string shown = request->command;
  std::map<std::string, std::string> env = {
      {"MOAT_SESSION_CMD", request->command},
      {"MOAT_SESSION_STATE", SessionState(id)},
      {"MOAT_SESSION_SCRIPT", kSessionScript},
      // The run's cwd, else the session's own on its first run (later: where it was left).
      {"MOAT_SESSION_CWD", request->cwd}};
  if (request->cwd.empty()) env["MOAT_SESSION_CWD"] = session_cwd;
  if (!session_cwd.empty()) {
    absl::MutexLock lock(&sessions_mu_);
    auto it = sessions_.find(sandbox);
    if (it != sessions_.end() && it->second.contains(id)) it->second[id] = "";  // first run only
  }
  request->command = "exec /bin/bash -c \"$MOAT_SESSION_SCRIPT\"";
  request->cwd = "";
  request->background = false;
  StartCommand(req, res, *std::move(request), shown, env);
}

void ExecdApi::SweepGoneSandboxes() {
  for (const std::string& id : commands_.Sandboxes()) {
    if (absl::IsNotFound(registry_->Get(id).status())) commands_.ForgetSandbox(id);
  }
  std::vector<std::string> with_contexts;
  {
    absl::MutexLock lock(&code_mu_);
    for (const auto& [id, contexts] : code_contexts_) with_contexts.push_back(id);
  }
  for (const std::string& id : with_contexts) {
    if (absl::IsNotFound(registry_->Get(id).status())) TakeCodeContexts(id, nullptr);
  }
}

bool ExecdApi::IsUpload(const httplib::Request& req) {
  // "/v1/sandboxes/{id}/execd/files/upload", checked without a regex: this runs per request.
  absl::string_view path = req.path;
  if (req.method != "POST" || !absl::ConsumePrefix(&path, "/v1/sandboxes/") ||
      !absl::ConsumeSuffix(&path, "/execd/files/upload")) {
    return false;
  }
  return !path.empty() && path.find('/') == absl::string_view::npos;
}

void ExecdApi::RegisterRoutes(httplib::Server& server) {
  RegisterCommandRoutes(server);
  RegisterSessionRoutes(server);
  RegisterCodeRoutes(server);
  RegisterFileRoutes(server);
  RegisterMetricsRoutes(server);
}

namespace {

// execd's Metrics, for the sandbox (its cgroup's CPU time and memory against its limits, not the
// node's): cpu_count is its CPU quota in cores, cpu_used_pct the share of one core used since
// the previous sample (100 = one core busy), memory in MiB.
json MetricsJson(const SandboxRecord& record, const SandboxHealth& now, double cpu_used_pct,
                 int64_t timestamp_ms) {
  constexpr double kMiB = 1024.0 * 1024.0;
  return {{"cpu_count", record.limits.cpus},
          {"cpu_used_pct", cpu_used_pct},
          {"mem_total_mib", static_cast<double>(record.limits.memory_bytes) / kMiB},
          {"mem_used_mib", static_cast<double>(now.memory_bytes) / kMiB},
          {"timestamp", timestamp_ms}};
}

double CpuPercent(double cpu_before, absl::Time at_before, double cpu_after, absl::Time at_after) {
  double wall = absl::ToDoubleSeconds(at_after - at_before);
  if (wall <= 0 || cpu_after < cpu_before) return 0;
  return 100.0 * (cpu_after - cpu_before) / wall;
}

}  // namespace

void ExecdApi::RegisterMetricsRoutes(httplib::Server& s) {
  // One sample, then another options_.metrics_sample later: a percentage needs an interval.
  s.Get(Route("/metrics"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    absl::StatusOr<SandboxHealth> first = backend_->Probe(record->id);
    if (!first.ok()) return SendStatus(res, first.status());
    absl::Time first_at = absl::Now();
    absl::SleepFor(options_.metrics_sample);
    absl::StatusOr<SandboxHealth> second = backend_->Probe(record->id);
    if (!second.ok()) return SendStatus(res, second.status());
    double pct = CpuPercent(first->cpu_seconds, first_at, second->cpu_seconds, absl::Now());
    SendJson(res, MetricsJson(*record, *second, pct, UnixMillis(clock_->Now())));
  });
  // Every options_.metrics_interval (1 s, as execd) until the client goes or the sandbox does.
  s.Get(Route("/metrics/watch"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    absl::StatusOr<SandboxHealth> first = backend_->Probe(record->id);
    if (!first.ok()) return SendStatus(res, first.status());
    struct Watch {
      SandboxRecord record;
      double cpu_seconds;
      absl::Time at;
    };
    auto watch = std::make_shared<Watch>(Watch{*record, first->cpu_seconds, absl::Now()});
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, watch](size_t, httplib::DataSink& sink) {
          // Sleeps in small steps so that a stopping server or a gone client ends it soon.
          for (absl::Time until = watch->at + options_.metrics_interval; absl::Now() < until;) {
            if (stopping_ || !sink.is_writable()) return false;
            absl::SleepFor(std::min(options_.poll, until - absl::Now()));
          }
          absl::StatusOr<SandboxHealth> now = backend_->Probe(watch->record.id);
          if (!now.ok()) {
            sink.done();  // The sandbox is gone: the stream ends.
            return true;
          }
          absl::Time at = absl::Now();
          double pct = CpuPercent(watch->cpu_seconds, watch->at, now->cpu_seconds, at);
          watch->cpu_seconds = now->cpu_seconds;
          watch->at = at;
          std::string event =
              SseEvent(MetricsJson(watch->record, *now, pct, UnixMillis(clock_->Now())));
          return sink.write(event.data(), event.size());
        });
  });
}

void ExecdApi::RegisterCommandRoutes(httplib::Server& s) {
  s.Post(Route("/command"),
         [this](const httplib::Request& req, httplib::Response& res) { RunCommand(req, res); });
  s.Delete(Route("/command"), [this](const httplib::Request& req, httplib::Response& res) {
    std::string id = req.get_param_value("id");
    if (id.empty()) return SendError(res, 400, "give the command's id: DELETE /command?id=...");
    absl::StatusOr<std::shared_ptr<Command>> command = commands_.Find(req.matches[1].str(), id);
    if (!command.ok()) return SendStatus(res, command.status());
    if ((*command)->running()) {
      absl::Status status = backend_->Interrupt((*command)->sandbox_id(), (*command)->backend_id(),
                                                options_.interrupt_grace);
      if (!status.ok() && !absl::IsNotFound(status)) return SendStatus(res, status);
    }
    res.status = 200;
  });
  s.Get(Route("/command/status/([^/]+)"),
        [this](const httplib::Request& req, httplib::Response& res) {
          absl::StatusOr<std::shared_ptr<Command>> command =
              commands_.Find(req.matches[1].str(), req.matches[2].str());
          if (!command.ok()) return SendStatus(res, command.status());
          CommandStatus status = (*command)->Status();
          json body = {{"id", status.id},
                       {"content", status.command},
                       {"running", status.running},
                       {"status", StatusName(status)},
                       {"exit_code", nullptr},
                       {"error", status.error},
                       {"started_at", FormatApiTime(status.started)},
                       {"finished_at", nullptr}};
          if (status.exit_code.has_value()) body["exit_code"] = *status.exit_code;
          if (!status.running) body["finished_at"] = FormatApiTime(status.finished);
          // moat's: the sandbox cgroup's CPU time across the command and its peak memory
          // (backend.h, ExecExit), so POST /v1/run reports what `moat run --json` does.
          if (status.exit.cpu.has_value()) {
            body["cpu_seconds"] = absl::ToDoubleSeconds(*status.exit.cpu);
          }
          if (status.exit.peak_memory_bytes.has_value()) {
            body["peak_memory_bytes"] = *status.exit.peak_memory_bytes;
          }
          if (status.exit.sandbox_oom_kills.has_value()) {
            body["sandbox_oom_kills"] = *status.exit.sandbox_oom_kills;
          }
          if (status.exit.sandbox_pids_limit_hits.has_value()) {
            body["sandbox_pids_limit_hits"] = *status.exit.sandbox_pids_limit_hits;
          }
          // moat's: what the sandbox did against its policy while the command ran, in
          // `moat run`'s words (seccomp, network, mount), and which stream was cut.
          json violations = json::array();
          for (const sandbox::Violation& v : status.violations) {
            violations.push_back({{"kind", v.kind}, {"detail", v.detail}});
          }
          body["violations"] = std::move(violations);
          if (status.violations_dropped > 0) {
            body["violations_dropped"] = status.violations_dropped;
          }
          body["stdout_truncated"] = status.stdout_truncated;
          body["stderr_truncated"] = status.stderr_truncated;
          SendJson(res, body);
        });
  s.Get(
      Route("/command/([^/]+)/logs"), [this](const httplib::Request& req, httplib::Response& res) {
        absl::StatusOr<std::shared_ptr<Command>> command =
            commands_.Find(req.matches[1].str(), req.matches[2].str());
        if (!command.ok()) return SendStatus(res, command.status());
        uint64_t cursor = 0;
        if (req.has_param("cursor") && !absl::SimpleAtoi(req.get_param_value("cursor"), &cursor)) {
          return SendError(res, 400, "\"cursor\" must be a whole number, 0 or more");
        }
        uint64_t next = 0;
        std::string text = (*command)->LogText(cursor, &next);
        res.status = 200;
        res.set_header("EXECD-COMMANDS-TAIL-CURSOR", std::to_string(next));
        res.set_content(text, "text/plain; charset=utf-8");
      });
}

ExecCallbacks ExecdApi::CallbacksFor(const std::shared_ptr<Command>& command, bool timed) const {
  ExecCallbacks callbacks;
  callbacks.on_stdout = [command](absl::string_view chunk) {
    command->AppendOutput(OutputStream::kStdout, chunk);
  };
  callbacks.on_stderr = [command](absl::string_view chunk) {
    command->AppendOutput(OutputStream::kStderr, chunk);
  };
  callbacks.accepts_more = [command] { return command->AcceptsMore(); };
  callbacks.on_exit = [command, hooks = hooks_, clock = clock_, timed](const ExecExit& exit) {
    command->Finish(exit, clock->Now());
    hooks->Exited(command->sandbox_id(),
                  timed ? std::optional<absl::Duration>(exit.duration) : std::nullopt);
  };
  return callbacks;
}

void ExecdApi::AddViolation(absl::string_view sandbox_id, absl::string_view kind,
                            absl::string_view detail) {
  commands_.AddViolation(sandbox_id, kind, detail);
}

void ExecdApi::Readopt(const std::vector<AdoptedSandboxInfo>& sandboxes) {
  for (const AdoptedSandboxInfo& sandbox : sandboxes) {
    for (const AdoptedCommandInfo& adopted : sandbox.commands) {
      nlohmann::json tag = nlohmann::json::parse(adopted.tag, nullptr, false);
      // Code contexts do not outlive their agent: their interpreters and runs end here.
      if (tag.is_object() && absl::StartsWith(tag.value("kind", ""), "code-")) {
        ExecCallbacks ignored;
        ignored.on_stdout = [](absl::string_view) {};
        ignored.on_stderr = [](absl::string_view) {};
        ignored.on_exit = [](const ExecExit&) {};
        if (backend_->Reattach(sandbox.id, adopted.command_id, std::move(ignored)).ok()) {
          backend_->Interrupt(sandbox.id, adopted.command_id, absl::ZeroDuration()).IgnoreError();
        }
        continue;
      }
      if (!tag.is_object() || !tag.contains("id") || !tag["id"].is_string()) {
        LogWarning(absl::StrCat("sandbox ", sandbox.id, ": command ", adopted.command_id,
                                " of the previous agent has no record; its output is not served"));
        continue;
      }
      std::shared_ptr<Command> command = commands_.Restore(
          sandbox.id, tag["id"].get<std::string>(), tag.value("command", ""),
          tag.value("background", false), absl::FromUnixNanos(tag.value("started_ns", int64_t{0})));
      command->SetBackendId(adopted.command_id);
      ExecCallbacks callbacks = CallbacksFor(command, /*timed=*/false);
      hooks_->Started(sandbox.id);
      if (absl::Status attached =
              backend_->Reattach(sandbox.id, adopted.command_id, std::move(callbacks));
          !attached.ok()) {
        command->FailToStart(absl::StrCat("lost across the agent's restart: ", attached.message()),
                             clock_->Now());
        hooks_->Exited(sandbox.id, std::nullopt);
      }
    }
  }
}

void ExecdApi::RunCommand(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<RunRequest> request = ParseRunRequest(req.body);
  if (!request.ok()) return SendStatus(res, request.status());
  const std::string shown = request->command;
  StartCommand(req, res, *std::move(request), shown, {});
}

std::shared_ptr<Command> ExecdApi::StartCommand(const httplib::Request& req, httplib::Response& res,
                                                ExecdRunRequest run, const std::string& shown,
                                                const std::map<std::string, std::string>& extra_env,
                                                const std::string& code_context) {
  absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
  if (!record.ok()) {
    SendStatus(res, record.status());
    return nullptr;
  }
  // A foreground run's stream reads every line: from the first one, before any can be dropped.
  absl::StatusOr<std::shared_ptr<Command>> launched =
      Launch(*record, run, shown, extra_env, code_context, /*live_reader=*/!run.background);
  if (!launched.ok()) {
    SendStatus(res, launched.status());
    return nullptr;
  }
  std::shared_ptr<Command> command = *std::move(launched);

  auto stream = std::make_shared<Stream>();
  stream->command = command;
  stream->code_context = code_context;
  stream->last_write = absl::Now();
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, stream](size_t, httplib::DataSink& sink) { return WriteStreamEvents(*stream, sink); });
  return command;
}

absl::StatusOr<std::shared_ptr<Command>> ExecdApi::Launch(
    const SandboxRecord& record, const ExecdRunRequest& request, const std::string& shown,
    const std::map<std::string, std::string>& extra_env, const std::string& code_context,
    bool live_reader) {
  SweepGoneSandboxes();
  ASSIGN_OR_RETURN(std::shared_ptr<Command> command,
                   commands_.Add(record.id, shown, request.background,
                                 request.run_result ? KeptOutput::kFirst : KeptOutput::kNewest));

  ExecRequest exec;
  exec.command = request.command;
  exec.cwd = request.cwd;
  exec.timeout = request.timeout;
  exec.cpu_timeout = request.cpu_timeout;
  exec.settle_reports = request.run_result;
  std::map<std::string, std::string> env = {{"PATH", kDefaultPath}};
  for (const auto& [k, v] : record.env) env[k] = v;
  for (const auto& [k, v] : request.envs) env[k] = v;
  for (const auto& [k, v] : extra_env) env[k] = v;
  exec.env.assign(env.begin(), env.end());
  // What a restarted agent needs to serve it again (Readopt); a code run is ended instead.
  exec.tag = code_context.empty()
                 ? nlohmann::json{{"id", command->id()},
                                  {"command", shown},
                                  {"background", request.background},
                                  {"started_ns", absl::ToUnixNanos(command->Status().started)}}
                       .dump()
                 : nlohmann::json{{"kind", "code-run"}, {"context", code_context}}.dump();

  ExecCallbacks callbacks = CallbacksFor(command, /*timed=*/true);
  if (live_reader) command->AttachReader();
  hooks_->Started(record.id);
  absl::StatusOr<std::string> backend_id = backend_->Exec(record.id, exec, std::move(callbacks));
  if (!backend_id.ok()) {
    command->FailToStart(backend_id.status().message(), clock_->Now());
    hooks_->Exited(record.id, std::nullopt);
    if (live_reader) command->DetachReader();
    return backend_id.status();
  }
  command->SetBackendId(*backend_id);
  command->SetResume([backend = backend_, sandbox_id = record.id, backend_id = *backend_id] {
    backend->ResumeOutput(sandbox_id, backend_id);
  });
  return command;
}

// Called by httplib until it returns false (abort: the client went away) or sink.done().
// Each call waits up to options_.poll for output, so a stream notices a deleted sandbox and
// sends keep-alive pings.
bool ExecdApi::WriteStreamEvents(Stream& stream, httplib::DataSink& sink) {
  if (stopping_) return false;
  Command& command = *stream.command;
  // Events are gathered and written together: a burst of lines is one write, not one each.
  std::string pending;
  const int64_t now_ms = UnixMillis(clock_->Now());
  const OutputEventWriter events(now_ms);
  auto add = [&](json event) {
    event["timestamp"] = now_ms;
    pending += SseEvent(event);
  };
  auto flush = [&] {
    if (pending.empty()) return true;
    stream.last_write = absl::Now();
    bool ok = sink.write(pending.data(), pending.size());
    pending.clear();
    return ok;
  };
  auto write = [&](json event) {
    add(std::move(event));
    return flush();
  };
  if (!stream.init_sent) {
    stream.init_sent = true;
    // A code run's init names its context, as execd's does.
    const std::string& init = stream.code_context.empty() ? command.id() : stream.code_context;
    if (!write({{"type", "init"}, {"text", init}})) return false;
    if (command.Status().background) sink.done();
    return true;
  }
  OutputBatch batch = command.Read(stream.next_line, stream.consumed_bytes, options_.poll);
  stream.next_line = batch.next_line;
  if (batch.dropped_bytes > 0) {
    stream.consumed_bytes += batch.dropped_bytes;
    events.Append(OutputStream::kStderr,
                  absl::StrCat("[moat: ", batch.dropped_bytes, " bytes dropped]\n"),
                  /*partial=*/false, &pending);
    if (!flush()) return false;
  }
  // One event per line, as execd sends them: the terminator removed, an empty line as "\n"
  // (their clients add the line breaks back), a partial last line as it is.
  for (const OutputLine& line : batch.lines) {
    stream.consumed_bytes += line.text.size();
    absl::string_view text = line.text;
    const bool complete = absl::ConsumeSuffix(&text, "\n");
    if (complete) absl::ConsumeSuffix(&text, "\r");
    if (!stream.code_context.empty() && line.stream == OutputStream::kStdout) {
      CodeFrame frame = ParseCodeFrame(text);
      switch (frame.kind) {
        case CodeFrame::Kind::kEvent:
          if (!frame.event.is_null()) add(std::move(frame.event));
          continue;
        case CodeFrame::Kind::kDone:
          stream.code_done = true;
          stream.code_execution_time = frame.execution_time;
          continue;
        case CodeFrame::Kind::kLost:
          stream.code_lost = frame.text;
          continue;
        case CodeFrame::Kind::kInvalid:
          break;  // Shown as it is, below.
      }
    }
    // moat's "partial": a last line without its terminator says so, so that a client can
    // rebuild the output byte for byte (POST /v1/run does); execd's clients ignore the field.
    // Written straight into the buffer (sse_event.h): a json object per line cost more than
    // the rest of the stream.
    events.Append(line.stream, text.empty() ? absl::string_view("\n") : text,
                  /*partial=*/!complete, &pending);
  }
  if (batch.finished && !stream.code_context.empty()) {
    // A code run ends with execution_complete once the interpreter finished it (after an error
    // event too, as a kernel's reply does); else with the error that says what happened.
    if (stream.code_done) {
      add({{"type", "execution_complete"}, {"execution_time", stream.code_execution_time}});
    } else {
      std::string why =
          !stream.code_lost.empty()
              ? absl::StrCat("the context's interpreter is gone (", stream.code_lost,
                             "); delete the context and create another")
              : "the run ended before the interpreter finished it (interrupted or killed)";
      add({{"type", "error"},
           {"error",
            {{"ename", stream.code_lost.empty() ? "ContextCancelled" : "ContextLost"},
             {"evalue", why},
             {"traceback", json::array({why})}}}});
    }
    if (!flush()) return false;
    sink.done();
    return true;
  }
  if (batch.finished) {
    CommandStatus status = command.Status();
    // A command that failed ends with execd's error event (CommandExecError, the exit code as
    // its value) and no execution_complete: their SDK reads execution_complete as success.
    if (std::optional<json> error = ErrorFor(status)) {
      add({{"type", "error"}, {"error", *error}});
    } else {
      add({{"type", "execution_complete"},
           {"execution_time", absl::ToInt64Milliseconds(status.exit.duration)}});
    }
    if (!flush()) return false;
    sink.done();
    return true;
  }
  if (!flush()) return false;
  // Written: the command may go on (backpressure, Command::ReaderAt).
  command.ReaderAt(stream.next_line);
  if (!batch.lines.empty()) return true;
  // Nothing came. A deleted sandbox's backend ends its commands (on_exit); should that not
  // come, the stream ends by itself after gone_grace.
  absl::Time now = absl::Now();
  if (absl::IsNotFound(registry_->Get(command.sandbox_id()).status())) {
    if (!stream.sandbox_gone_since.has_value()) stream.sandbox_gone_since = now;
    if (now - *stream.sandbox_gone_since >= options_.gone_grace) {
      std::string why = "the sandbox was deleted while the command ran";
      if (!write({{"type", "error"},
                  {"error",
                   {{"ename", "SandboxDeleted"},
                    {"evalue", why},
                    {"traceback", json::array({why})}}}})) {
        return false;
      }
      sink.done();
      return true;
    }
  }
  if (now - stream.last_write >= options_.keepalive) {
    if (!write({{"type", "ping"}, {"text", "pong"}})) return false;
  }
  return sink.is_writable();
}

}  // namespace moat::agent
