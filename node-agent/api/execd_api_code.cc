// Code contexts of the per-sandbox API (execd's /code, /code/context(s)): the routes, and the
// interpreters they start inside the sandbox (code_interpreter.h says how they talk).
#include <httplib.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node-agent/api/code_interpreter.h"
#include "node-agent/api/execd_api.h"
#include "node-agent/api/execd_api_internal.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::agent {
namespace {

using nlohmann::json;
using namespace execd_internal;  // NOLINT: this layer's own helpers.

constexpr size_t kMaxCodeBytes = 64 << 10;
constexpr char kPython[] = "python";
constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string SocketPath(const std::string& context) {
  return absl::StrCat("/tmp/.moat-code-", context, ".sock");
}

absl::Status OnlyPython(const std::string& language) {
  if (language == kPython) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("language \"", language,
                   "\" has no code contexts here; only \"python\" is served (for bash: use "
                   "POST /session)"));
}

}  // namespace

// What the agent sees of one interpreter: whether it listens yet, whether it ended, and the
// end of what it wrote to stderr (for the error when it does not start).
class CodeServer {
 public:
  void Stdout(absl::string_view chunk) {
    absl::MutexLock lock(&mu_);
    if (ready_) return;
    out_.append(chunk.data(), std::min(chunk.size(), size_t{256}));
    if (absl::StrContains(out_, kCodeServerReady)) ready_ = true;
  }
  void Stderr(absl::string_view chunk) {
    absl::MutexLock lock(&mu_);
    err_.append(chunk.data(), chunk.size());
    if (err_.size() > 2048) err_.erase(0, err_.size() - 2048);
  }
  void Exited(const ExecExit& exit) {
    absl::MutexLock lock(&mu_);
    exited_ = true;
    exit_ = exit;
  }
  bool exited() const {
    absl::MutexLock lock(&mu_);
    return exited_;
  }
  // OK once it listens; else why not, within `timeout`.
  absl::Status WaitReady(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &CodeServer::Settled), timeout);
    if (ready_) return absl::OkStatus();
    if (!exited_) {
      return absl::UnavailableError(absl::StrCat(
          "the context's interpreter did not start within ", absl::FormatDuration(timeout),
          " (the sandbox may be short of CPU or memory); try again"));
    }
    if (exit_.exit_code == 127 || !exit_.error.empty()) {
      return absl::FailedPreconditionError(
          "this sandbox's root has no python3, which code contexts run; use a profile whose "
          "root has it");
    }
    return absl::InternalError(absl::StrCat("the context's interpreter ended at its start: ",
                                            err_.empty() ? "no message" : err_));
  }

 private:
  bool Settled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ready_ || exited_; }

  mutable absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  ExecExit exit_ ABSL_GUARDED_BY(mu_);
  std::string out_ ABSL_GUARDED_BY(mu_);
  std::string err_ ABSL_GUARDED_BY(mu_);
};

struct ExecdApi::CodeContext {
  std::string id, language, sandbox_id;
  bool is_default = false;
  std::string server_command;  // the backend's id of the interpreter
  std::shared_ptr<CodeServer> server;

  // The run in progress (its client), if any: one at a time, as execd's "session is busy".
  absl::Mutex mu;
  std::shared_ptr<Command> run ABSL_GUARDED_BY(mu);
  bool starting ABSL_GUARDED_BY(mu) = false;

  json Json() const { return {{"id", id}, {"language", language}}; }
};

absl::StatusOr<std::shared_ptr<ExecdApi::CodeContext>> ExecdApi::NewCodeContext(
    const SandboxRecord& record, const std::string& language, const std::string& cwd,
    bool is_default) {
  RETURN_IF_ERROR(OnlyPython(language));
  {
    absl::MutexLock lock(&code_mu_);
    auto it = code_contexts_.find(record.id);
    if (it != code_contexts_.end() && it->second.size() >= options_.max_code_contexts) {
      return absl::ResourceExhaustedError(
          absl::StrCat("this sandbox has ", options_.max_code_contexts,
                       " code contexts, the limit; delete one first"));
    }
  }
  absl::StatusOr<std::string> token = NewToken();
  if (!token.ok()) return token.status();
  auto context = std::make_shared<CodeContext>();
  context->id = absl::StrCat("ctx-", token->substr(0, 24));
  context->language = language;
  context->sandbox_id = record.id;
  context->is_default = is_default;
  context->server = std::make_shared<CodeServer>();

  ExecRequest exec;
  exec.command = "exec python3 -c \"$MOAT_CODE_SERVER\"";
  std::map<std::string, std::string> env = {{"PATH", kDefaultPath}};
  for (const auto& [k, v] : record.env) env[k] = v;
  env["MOAT_CODE_SERVER"] = kCodeServerScript;
  env["MOAT_CODE_SOCKET"] = SocketPath(context->id);
  env["MOAT_CODE_CWD"] = cwd;
  exec.env.assign(env.begin(), env.end());
  exec.tag = json{{"kind", "code-server"}, {"context", context->id}}.dump();
  ExecCallbacks callbacks;
  callbacks.on_stdout = [server = context->server](absl::string_view c) { server->Stdout(c); };
  callbacks.on_stderr = [server = context->server](absl::string_view c) { server->Stderr(c); };
  callbacks.on_exit = [server = context->server](const ExecExit& exit) { server->Exited(exit); };
  ASSIGN_OR_RETURN(context->server_command, backend_->Exec(record.id, exec, std::move(callbacks)));
  if (absl::Status ready = context->server->WaitReady(options_.code_start_timeout); !ready.ok()) {
    EndCodeContext(*context);
    return ready;
  }
  std::shared_ptr<CodeContext> existing;
  {
    absl::MutexLock lock(&code_mu_);
    std::map<std::string, std::shared_ptr<CodeContext>>& contexts = code_contexts_[record.id];
    // Two first runs without a context at once: the first default made is kept.
    for (const auto& [id, other] : contexts) {
      if (is_default && other->is_default && other->language == language &&
          !other->server->exited()) {
        existing = other;
      }
    }
    if (existing == nullptr) contexts[context->id] = context;
  }
  if (existing != nullptr) {
    EndCodeContext(*context);
    return existing;
  }
  return context;
}

void ExecdApi::EndCodeContext(const CodeContext& context) {
  // SIGINT then SIGKILL at once: the interpreter and whatever its code started end.
  backend_->Interrupt(context.sandbox_id, context.server_command, absl::ZeroDuration())
      .IgnoreError();
  backend_->Remove(context.sandbox_id, SocketPath(context.id)).IgnoreError();
}

std::vector<std::shared_ptr<ExecdApi::CodeContext>> ExecdApi::TakeCodeContexts(
    absl::string_view sandbox_id, const std::function<bool(const CodeContext&)>& take) {
  std::vector<std::shared_ptr<CodeContext>> taken;
  absl::MutexLock lock(&code_mu_);
  auto it = code_contexts_.find(sandbox_id);
  if (it == code_contexts_.end()) return taken;
  for (auto c = it->second.begin(); c != it->second.end();) {
    if (take == nullptr || take(*c->second)) {
      taken.push_back(c->second);
      c = it->second.erase(c);
    } else {
      ++c;
    }
  }
  if (it->second.empty()) code_contexts_.erase(it);
  return taken;
}

void ExecdApi::RegisterCodeRoutes(httplib::Server& s) {
  s.Post(Route("/code/context"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    std::string language = kPython, cwd;
    if (!req.body.empty()) {
      absl::StatusOr<json> doc = ParseBody(req.body);
      if (!doc.ok()) return SendStatus(res, doc.status());
      if (!doc->is_object()) return SendError(res, 400, "the body must be a JSON object");
      for (const auto& [key, value] : doc->items()) {
        if (value.is_null()) continue;
        if (key != "language" && key != "cwd") {
          return SendError(res, 400,
                           absl::StrCat("unknown field \"", key, "\"; allowed: language, cwd"));
        }
        if (!value.is_string()) {
          return SendError(res, 400, absl::StrCat("\"", key, "\" must be a string"));
        }
        (key == "language" ? language : cwd) = value.get<std::string>();
      }
      if (language.empty()) language = kPython;
      if (!cwd.empty() && (cwd[0] != '/' || cwd.find('\0') != std::string::npos)) {
        return SendError(res, 400, "\"cwd\" must be an absolute path in the sandbox");
      }
    }
    absl::StatusOr<std::shared_ptr<CodeContext>> context =
        NewCodeContext(*record, language, cwd, /*is_default=*/false);
    if (!context.ok()) return SendStatus(res, context.status());
    SendJson(res, (*context)->Json());
  });
  s.Post(Route("/code"),
         [this](const httplib::Request& req, httplib::Response& res) { RunCode(req, res); });
  s.Delete(Route("/code"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    const std::string id = req.get_param_value("id");
    if (id.empty()) return SendError(res, 400, "give the context's id: DELETE /code?id=...");
    std::shared_ptr<CodeContext> context;
    {
      absl::MutexLock lock(&code_mu_);
      auto it = code_contexts_.find(record->id);
      if (it != code_contexts_.end() && it->second.contains(id)) context = it->second[id];
    }
    if (context == nullptr) {
      return SendError(res, 404, absl::StrCat("no code context \"", id, "\" in this sandbox"));
    }
    std::shared_ptr<Command> run;
    {
      absl::MutexLock lock(&context->mu);
      run = context->run;
    }
    // The run's client passes SIGINT on (KeyboardInterrupt in the code); it is killed after
    // the grace, which ends the run anyway.
    if (run != nullptr && run->running()) {
      absl::Status status =
          backend_->Interrupt(record->id, run->backend_id(), options_.interrupt_grace);
      if (!status.ok() && !absl::IsNotFound(status)) return SendStatus(res, status);
    }
    res.status = 200;
  });
  s.Get(Route("/code/contexts"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    const std::string language = req.get_param_value("language");
    json list = json::array();
    absl::MutexLock lock(&code_mu_);
    auto it = code_contexts_.find(record->id);
    if (it != code_contexts_.end()) {
      for (const auto& [id, context] : it->second) {
        if (language.empty() || context->language == language) list.push_back(context->Json());
      }
    }
    SendJson(res, list);
  });
  s.Delete(Route("/code/contexts"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    const std::string language = req.get_param_value("language");
    if (language.empty()) {
      return SendError(res, 400, "give the language: DELETE /code/contexts?language=python");
    }
    for (const auto& context : TakeCodeContexts(
             record->id, [&](const CodeContext& c) { return c.language == language; })) {
      EndCodeContext(*context);
    }
    res.status = 200;
  });
  s.Get(
      Route("/code/contexts/([^/]+)"), [this](const httplib::Request& req, httplib::Response& res) {
        absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
        if (!record.ok()) return SendStatus(res, record.status());
        const std::string id = req.matches[2].str();
        absl::MutexLock lock(&code_mu_);
        auto it = code_contexts_.find(record->id);
        if (it == code_contexts_.end() || !it->second.contains(id)) {
          return SendError(res, 404, absl::StrCat("no code context \"", id, "\" in this sandbox"));
        }
        SendJson(res, it->second[id]->Json());
      });
  s.Delete(
      Route("/code/contexts/([^/]+)"), [this](const httplib::Request& req, httplib::Response& res) {
        absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
        if (!record.ok()) return SendStatus(res, record.status());
        const std::string id = req.matches[2].str();
        std::vector<std::shared_ptr<CodeContext>> taken =
            TakeCodeContexts(record->id, [&](const CodeContext& c) { return c.id == id; });
        if (taken.empty()) {
          return SendError(res, 404, absl::StrCat("no code context \"", id, "\" in this sandbox"));
        }
        EndCodeContext(*taken.front());
        res.status = 200;
      });
}

void ExecdApi::RunCode(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<json> doc = ParseBody(req.body);
  if (!doc.ok()) return SendStatus(res, doc.status());
  if (!doc->is_object()) return SendError(res, 400, "the body must be a JSON object");
  std::string code, id, language;
  for (const auto& [key, value] : doc->items()) {
    if (value.is_null()) continue;
    if (key == "code") {
      if (!value.is_string()) return SendError(res, 400, "\"code\" must be a string");
      code = value.get<std::string>();
    } else if (key == "context") {
      if (!value.is_object()) {
        return SendError(res, 400, "\"context\" must be an object: {\"id\", \"language\"}");
      }
      for (const auto& [k, v] : value.items()) {
        if (v.is_null()) continue;
        if ((k != "id" && k != "language") || !v.is_string()) {
          return SendError(res, 400,
                           absl::StrCat("\"context.", k, "\": only the strings id and language"));
        }
        (k == "id" ? id : language) = v.get<std::string>();
      }
    } else {
      return SendError(res, 400,
                       absl::StrCat("unknown field \"", key, "\"; allowed: code, context"));
    }
  }
  if (code.empty() || code.size() > kMaxCodeBytes || code.find('\0') != std::string::npos) {
    return SendError(res, 400,
                     absl::StrCat("\"code\" is required: 1 to ", kMaxCodeBytes, " bytes, no NUL"));
  }
  // No context and no language: a plain shell command, as execd runs it.
  if (id.empty() && language.empty()) {
    ExecdRunRequest run;
    run.command = code;
    StartCommand(req, res, std::move(run), code, {});
    return;
  }
  absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
  if (!record.ok()) return SendStatus(res, record.status());
  std::shared_ptr<CodeContext> context;
  {
    absl::MutexLock lock(&code_mu_);
    auto it = code_contexts_.find(record->id);
    if (it != code_contexts_.end()) {
      for (const auto& [cid, c] : it->second) {
        if (id.empty() ? (c->is_default && c->language == language) : cid == id) context = c;
      }
    }
  }
  if (!id.empty() && context == nullptr) {
    return SendError(res, 404,
                     absl::StrCat("no code context \"", id,
                                  "\" in this sandbox; create one with POST /code/context"));
  }
  if (context != nullptr && context->server->exited()) {
    if (!context->is_default) {
      return SendError(res, 409,
                       absl::StrCat("the interpreter of code context \"", context->id,
                                    "\" has ended (its code exited or was killed); delete it "
                                    "and create another"));
    }
    // The default context comes back, afresh, as a kernel restarts.
    TakeCodeContexts(record->id, [&](const CodeContext& c) { return &c == context.get(); });
    EndCodeContext(*context);
    context = nullptr;
  }
  if (context == nullptr) {
    absl::StatusOr<std::shared_ptr<CodeContext>> made =
        NewCodeContext(*record, language, "", /*is_default=*/true);
    if (!made.ok()) return SendStatus(res, made.status());
    context = *made;
  }
  {
    absl::MutexLock lock(&context->mu);
    if (context->starting || (context->run != nullptr && context->run->running())) {
      return SendError(res, 409,
                       absl::StrCat("code context \"", context->id,
                                    "\" is running code; wait for it, or interrupt it "
                                    "(DELETE /code?id=",
                                    context->id, ")"));
    }
    context->starting = true;
  }
  ExecdRunRequest run;
  run.command = "exec python3 -I -S -c \"$MOAT_CODE_CLIENT\"";
  std::map<std::string, std::string> env = {{"MOAT_CODE_CLIENT", kCodeClientScript},
                                            {"MOAT_CODE_SOCKET", SocketPath(context->id)},
                                            {"MOAT_CODE", code}};
  std::shared_ptr<Command> command = StartCommand(req, res, std::move(run), code, env, context->id);
  absl::MutexLock lock(&context->mu);
  context->starting = false;
  context->run = command;
}

}  // namespace moat::agent
