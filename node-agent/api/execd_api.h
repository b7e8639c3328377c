// The per-sandbox API: OpenSandbox's execd API for commands and files
// (../shared/specs/opensandbox/execd-api.yaml), served by the agent under
// /v1/sandboxes/{id}/execd, outside the sandbox. Every route goes through SandboxBackend; the
// sandbox's token was already checked by HttpApi (Authorized). docs/execd.md shows its use.
//
//   POST   /command                  run; output as SSE (init, stdout, stderr, error,
//                                    execution_complete, ping), or background: init only
//   DELETE /command?id=              interrupt
//   GET    /command/status/{cmd}     state, exit code, error, times (moat's: CPU, memory,
//                                    violations, truncation)
//   GET    /command/{cmd}/logs       cleaned output as text; ?cursor= line to read from
//   GET    /files/info?path=...      stat       DELETE /files?path=...        remove files
//   POST   /files/mv                 move       GET    /files/search          glob
//   POST   /files/upload             multipart  GET    /files/download        with Range
//   POST   /files/replace            text replacement
//   POST   /files/permissions        501: the backend cannot change modes or owners
//   POST   /directories              mkdir -p   DELETE /directories?path=...  rm -r
//   GET    /directories/list         with depth
//   POST   /code/context             a Python context: one interpreter in the sandbox
//   POST   /code                     run code in a context (or the language's default one); SSE
//   DELETE /code?id=                 interrupt the context's run
//   GET    /code/contexts[/{ctx}]    list (?language=) or one; DELETE: end them
//
// Errors are {"error": {"code", "message"}} as in the node API (api_json.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node-agent/api/command_table.h"
#include "node-agent/backend/backend.h"
#include "node-agent/metrics.h"
#include "node-agent/pool/registry.h"
#include "util/clock.h"

namespace httplib {
class DataSink;
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace moat::agent {

struct ExecdOptions {
  uint64_t max_upload_bytes = 64 << 20;  // Sum of the files of one upload; above it: 413.
  size_t max_search_results = 1000;      // /files/search stops there (header X-Moat-Truncated).
  size_t max_walk_entries = 100000;      // Entries a search or deep listing may visit.
  size_t max_list_entries = 10000;       // /directories/list stops there.
  int max_list_depth = 32;
  uint64_t max_replace_file_bytes = 16 << 20;  // /files/replace reads the whole file.
  uint64_t download_piece_bytes = 1 << 20;     // Downloads go through ReadFile in such pieces.
  absl::Duration interrupt_grace = absl::Seconds(2);        // SIGINT, then SIGKILL after this.
  absl::Duration metrics_sample = absl::Milliseconds(100);  // GET /metrics: CPU over this long.
  absl::Duration metrics_interval = absl::Seconds(1);       // /metrics/watch: one event each.
  absl::Duration keepalive = absl::Seconds(3);  // A "ping" event on a silent stream (as execd).
  // How long a new code context's interpreter may take to listen; then the create fails.
  absl::Duration code_start_timeout = absl::Seconds(20);
  size_t max_code_contexts = 16;  // Per sandbox; above it: 429.
  // How often a waiting stream checks that its sandbox still exists, and how long it waits for
  // the exit of a command whose sandbox is gone before it ends the stream itself.
  absl::Duration poll = absl::Milliseconds(250);
  absl::Duration gone_grace = absl::Seconds(5);
  // A streaming command holds one HTTP thread for as long as it runs, so the server needs
  // more threads than httplib's default (8) for everything else to stay served.
  size_t http_threads = 64;
  CommandTableOptions commands;
};

// A command request of the execd API (RunCommandRequest; a session's RunInSessionRequest).
struct ExecdRunRequest {
  std::string command;
  std::string cwd;
  bool background = false;
  absl::Duration timeout = absl::InfiniteDuration();
  // moat's extension: the CPU time the sandbox may use while the command runs (ms in the body).
  absl::Duration cpu_timeout = absl::InfiniteDuration();
  // moat's extension (POST /v1/run sends it): the result is read as `moat run --json`'s. Each
  // stream's first 1 MiB is kept (KeptOutput::kFirst) and the sandbox's violations are settled
  // before the command's end is reported (ExecRequest::settle_reports).
  bool run_result = false;
  std::map<std::string, std::string> envs;
};

class ExecdApi {
 public:
  // All pointers must outlive the ExecdApi; backend callbacks that come after it is destroyed
  // only update their command (they hold it) and touch nothing else.
  ExecdApi(SandboxBackend* backend, Registry* registry, AgentMetrics* metrics, const Clock* clock,
           ExecdOptions options);
  ~ExecdApi();
  ExecdApi(const ExecdApi&) = delete;
  ExecdApi& operator=(const ExecdApi&) = delete;

  // Adds the routes (except /ping, which HttpApi serves) to `server`.
  void RegisterRoutes(httplib::Server& server);
  // At start: the commands of re-adopted sandboxes (SandboxService::Readopt) are known again
  // under their ids, with the output kept since they started; those that ended meanwhile are
  // finished with their exit status.
  void Readopt(const std::vector<AdoptedSandboxInfo>& sandboxes);
  // The node API's create with an entrypoint (POST /v1/sandboxes with "entrypoint"; in
  // execd_api_entrypoint.cc): runs EntrypointCheckCommand (util/shell_command.h) in the sandbox,
  // waits up to `check_timeout` for it, and once it exited 0 starts `words` as a background
  // command, whose id it returns (GET /command/status/{id} follows it). InvalidArgument with
  // EntrypointNotRunnableMessage if the check exited otherwise; Unavailable if it ended another
  // way (timed out, failed to start) or the start failed. The caller deletes the sandbox then.
  absl::StatusOr<std::string> StartEntrypoint(const SandboxRecord& record,
                                              const std::vector<std::string>& words,
                                              absl::Duration check_timeout = absl::Seconds(10));
  // The sandbox was deleted: forget its commands.
  void ForgetSandbox(absl::string_view sandbox_id);
  // A violation of the sandbox, in `moat run`'s words (kind "seccomp", "network", ...): listed in
  // the status of each of its commands that runs (GET /command/status/{id}).
  void AddViolation(absl::string_view sandbox_id, absl::string_view kind, absl::string_view detail);
  // Before the server stops: streams end within `poll` instead of when their command does
  // (the commands go on; their status and logs stay).
  void StopStreams() { stopping_ = true; }
  // For HttpApi's body limits: is this request an upload, which may be up to max_upload_bytes?
  static bool IsUpload(const httplib::Request& req);

  const ExecdOptions& options() const { return options_; }
  CommandTable& commands() { return commands_; }

 private:
  class Hooks;
  struct Stream;
  struct CodeContext;  // In execd_api_code.cc.

  // The backend's callbacks of `command`: its output and exit, then the hooks (the registry's
  // state; `timed`: the command latency metric too, not for a re-adopted command).
  ExecCallbacks CallbacksFor(const std::shared_ptr<Command>& command, bool timed) const;
  void RegisterCommandRoutes(httplib::Server& server);
  void RegisterFileRoutes(httplib::Server& server);  // In execd_api_files.cc.
  void RegisterMetricsRoutes(httplib::Server& server);
  void RunCommand(const httplib::Request& req, httplib::Response& res);
  // Starts `run` (parsed from a request) and streams it; `shown` is the command's text in its
  // status (a session's run is wrapped: RunInSession).
  // `code_context`: the run of a code context (its client): the stream's init names the context
  // and its lines are the interpreter's frames (code_interpreter.h). Returns the command, or null
  // if it did not start (the response says why).
  std::shared_ptr<Command> StartCommand(const httplib::Request& req, httplib::Response& res,
                                        ExecdRunRequest run, const std::string& shown,
                                        const std::map<std::string, std::string>& extra_env,
                                        const std::string& code_context = "");
  // Adds `request` to the command table and starts it in `record`'s sandbox; the request's
  // part of StartCommand, without the stream. `live_reader`: a reader (the caller's stream) is
  // attached before it starts (Command::AttachReader), so no line is dropped before it reads.
  absl::StatusOr<std::shared_ptr<Command>> Launch(
      const SandboxRecord& record, const ExecdRunRequest& request, const std::string& shown,
      const std::map<std::string, std::string>& extra_env, const std::string& code_context = "",
      bool live_reader = false);
  void RegisterCodeRoutes(httplib::Server& server);  // In execd_api_code.cc.
  void RunCode(const httplib::Request& req, httplib::Response& res);
  absl::StatusOr<std::shared_ptr<CodeContext>> NewCodeContext(const SandboxRecord& record,
                                                              const std::string& language,
                                                              const std::string& cwd,
                                                              bool is_default);
  // Ends the context's interpreter (and the code it runs) and removes its socket.
  void EndCodeContext(const CodeContext& context);
  // Takes the contexts of `sandbox_id` for which `take` holds out of the table (all: null).
  std::vector<std::shared_ptr<CodeContext>> TakeCodeContexts(
      absl::string_view sandbox_id, const std::function<bool(const CodeContext&)>& take);
  void RegisterSessionRoutes(httplib::Server& server);
  void RunInSession(const httplib::Request& req, httplib::Response& res);
  void Download(const httplib::Request& req, httplib::Response& res);
  void Upload(const httplib::Request& req, httplib::Response& res);
  void Search(const httplib::Request& req, httplib::Response& res);
  void ListDirectory(const httplib::Request& req, httplib::Response& res);
  void Replace(const httplib::Request& req, httplib::Response& res);
  bool WriteStreamEvents(Stream& stream, httplib::DataSink& sink);
  // Forgets commands of sandboxes that no longer exist (deleted by expiry, which does not go
  // through ForgetSandbox).
  void SweepGoneSandboxes();

  // Bash sessions of each sandbox: session id -> its working directory at creation.
  mutable absl::Mutex sessions_mu_;
  absl::flat_hash_map<std::string, std::map<std::string, std::string>> sessions_
      ABSL_GUARDED_BY(sessions_mu_);
  // Code contexts of each sandbox: context id -> context.
  mutable absl::Mutex code_mu_;
  absl::flat_hash_map<std::string, std::map<std::string, std::shared_ptr<CodeContext>>>
      code_contexts_ ABSL_GUARDED_BY(code_mu_);
  SandboxBackend* backend_;
  Registry* registry_;
  const Clock* clock_;
  const ExecdOptions options_;
  CommandTable commands_;
  std::shared_ptr<Hooks> hooks_;
  std::atomic<bool> stopping_{false};
};

}  // namespace moat::agent
