#include "controller/agent_client.h"

#include <httplib.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "util/http/client.h"
#include "util/http/client_pool.h"
#include "util/log.h"
#include "util/shell_command.h"

namespace moat::controller {
namespace {

using nlohmann::json;

absl::Status FromHttp(const httplib::Result& res, absl::string_view what) {
  if (!res) {
    return absl::UnavailableError(absl::StrCat(
        what, ": the agent did not answer: ", http::DescribeFailure(res.error(), "nodes.tls.ca")));
  }
  if (res->status >= 200 && res->status < 300) return absl::OkStatus();
  std::string message = res->body.substr(0, 500), code;
  json body = json::parse(res->body, nullptr, false);
  // The agent's errors are flat {"code", "message"}; older agents nested them under "error".
  const json* error = body.is_object() && body.contains("error") && body["error"].is_object()
                          ? &body["error"]
                          : &body;
  if (error->is_object()) {
    if (error->contains("message") && (*error)["message"].is_string()) {
      message = (*error)["message"].get<std::string>();
    }
    if (error->contains("code") && (*error)["code"].is_string()) {
      code = (*error)["code"].get<std::string>();
    }
  }
  // The client's own mistake, the same on every node: its message as the agent wrote it.
  if (res->status == 400 && code == kEntrypointNotRunnableCode) {
    return absl::InvalidArgumentError(message);
  }
  std::string text = absl::StrCat(what, ": the agent answered ", res->status, ": ", message);
  if (res->status == 404) return absl::NotFoundError(text);
  if (res->status >= 500 || res->status == 429) return absl::UnavailableError(text);
  return absl::FailedPreconditionError(text);
}

// GET .../command/status/{id}: execd's fields plus moat's cpu_seconds and peak_memory_bytes.
absl::StatusOr<json> StatusBody(const httplib::Result& got) {
  if (absl::Status st = FromHttp(got, "reading a command's status"); !st.ok()) return st;
  json s = json::parse(got->body, nullptr, false);
  if (!s.is_object()) return absl::UnavailableError("the agent's command status is not JSON");
  return s;
}

AgentCommandState StateFrom(const json& s) {
  AgentCommandState state;
  state.running = s.value("running", false);
  state.status = s.value("status", "");
  if (s.contains("exit_code") && s["exit_code"].is_number_integer()) {
    state.exit_code = s["exit_code"].get<int>();
  }
  state.error = s.value("error", "");
  return state;
}

json CommandBody(const AgentCommand& command, bool background) {
  json body = {{"command", command.command}, {"envs", command.env}};
  if (background) body["background"] = true;
  if (command.run_result) body["run_result"] = true;
  if (command.timeout > absl::ZeroDuration()) {
    body["timeout"] = absl::ToInt64Milliseconds(command.timeout);
  }
  if (command.cpu_timeout > absl::ZeroDuration()) {
    body["cpu_timeout"] = std::max<int64_t>(1, absl::ToInt64Milliseconds(command.cpu_timeout));
  }
  return body;
}

AgentSandbox SandboxFrom(const json& j) {
  AgentSandbox s;
  s.id = j.value("id", "");
  s.token = j.value("token", "");
  s.state = j.value("state", "");
  s.start = j.value("start_path", "");
  s.entrypoint_command = j.value("entrypoint_command", "");
  if (j.contains("metadata") && j["metadata"].is_object()) {
    for (const auto& [k, v] : j["metadata"].items()) {
      if (v.is_string()) s.metadata[k] = v.get<std::string>();
    }
  }
  return s;
}

class HttpAgentClient final : public AgentClient {
 public:
  HttpAgentClient(absl::Duration timeout, http::ClientPool* pool)
      : timeout_(timeout),
        own_pool_(pool == nullptr ? std::make_unique<http::ClientPool>() : nullptr),
        pool_(pool == nullptr ? own_pool_.get() : pool) {}

  absl::StatusOr<AgentSandbox> Create(const AgentEndpoint& agent,
                                      const AgentCreate& request) override {
    absl::StatusOr<AgentSandbox> created = CreateOnce(agent, request, /*with_entrypoint=*/true);
    // An agent older than the field refuses it before it makes anything: asked again without
    // it, the controller starts the entrypoint through execd (three more calls per create).
    if (!request.entrypoint.empty() && absl::IsFailedPrecondition(created.status()) &&
        absl::StrContains(created.status().message(), "unknown field \"entrypoint\"")) {
      LogWarning(absl::StrCat("the agent at ", agent.url,
                              " starts no entrypoint in its create (it is older than this "
                              "controller); upgrade it: each create costs it 3 more calls"));
      created = CreateOnce(agent, request, /*with_entrypoint=*/false);
    }
    return created;
  }

  absl::StatusOr<AgentSandbox> CreateOnce(const AgentEndpoint& agent, const AgentCreate& request,
                                          bool with_entrypoint) {
    json body = {{"profile", request.profile},
                 {"env", request.env},
                 {"metadata", request.metadata},
                 {"ttl_seconds", std::max<int64_t>(1, absl::ToInt64Seconds(request.ttl))}};
    json limits = json::object();
    if (request.cpus > 0) limits["cpus"] = request.cpus;
    if (request.memory_bytes > 0) limits["memory_bytes"] = request.memory_bytes;
    if (!limits.empty()) body["limits"] = limits;
    if (!request.policy.is_null()) body["policy"] = request.policy;
    if (with_entrypoint && !request.entrypoint.empty()) body["entrypoint"] = request.entrypoint;
    const std::string text = body.dump();
    auto res = Call(agent, [&](httplib::Client& c) {
      return c.Post("/v1/sandboxes", Headers(agent), text, "application/json");
    });
    absl::Status status = FromHttp(res, "creating a sandbox");
    if (!status.ok()) return status;
    json out = json::parse(res->body, nullptr, false);
    if (!out.is_object() || !out.contains("id") || !out["id"].is_string()) {
      return absl::UnavailableError("creating a sandbox: the agent's answer has no id");
    }
    return SandboxFrom(out);
  }

  absl::Status Delete(const AgentEndpoint& agent, const std::string& agent_id) override {
    const std::string path = absl::StrCat("/v1/sandboxes/", agent_id);
    return FromHttp(Call(agent, [&](httplib::Client& c) { return c.Delete(path, Headers(agent)); }),
                    "deleting a sandbox");
  }

  absl::StatusOr<std::vector<AgentSandbox>> List(const AgentEndpoint& agent) override {
    auto res =
        Call(agent, [&](httplib::Client& c) { return c.Get("/v1/sandboxes", Headers(agent)); });
    absl::Status status = FromHttp(res, "listing sandboxes");
    if (!status.ok()) return status;
    json out = json::parse(res->body, nullptr, false);
    std::vector<AgentSandbox> list;
    if (!out.is_object() || !out.contains("items") || !out["items"].is_array()) {
      return absl::UnavailableError("listing sandboxes: the agent's answer has no items");
    }
    for (const json& item : out["items"]) {
      if (item.is_object()) list.push_back(SandboxFrom(item));
    }
    return list;
  }

  absl::Status Renew(const AgentEndpoint& agent, const std::string& agent_id,
                     absl::Duration ttl) override {
    json body = {{"ttl_seconds", std::max<int64_t>(1, absl::ToInt64Seconds(ttl))}};
    return FromHttp(PostJson(agent, absl::StrCat("/v1/sandboxes/", agent_id, "/renew"),
                             Headers(agent), body.dump()),
                    "renewing a sandbox");
  }

  absl::Status Pause(const AgentEndpoint& agent, const std::string& agent_id) override {
    return FromHttp(
        PostJson(agent, absl::StrCat("/v1/sandboxes/", agent_id, "/pause"), Headers(agent), ""),
        "pausing a sandbox");
  }

  absl::Status Resume(const AgentEndpoint& agent, const std::string& agent_id) override {
    return FromHttp(
        PostJson(agent, absl::StrCat("/v1/sandboxes/", agent_id, "/resume"), Headers(agent), ""),
        "resuming a sandbox");
  }

  absl::StatusOr<AgentCommandResult> RunCommand(const AgentEndpoint& agent,
                                                const std::string& agent_id,
                                                const std::string& sandbox_token,
                                                const AgentCommand& command) override {
    const json body = CommandBody(command, /*background=*/false);
    // Silent commands get a ping every 3 s; the read timeout only has to outlast that, but the
    // command may run up to its own timeout.
    const absl::Duration read_timeout =
        absl::Seconds(std::max<int64_t>(60, absl::ToInt64Seconds(command.timeout) + 30));
    const httplib::Headers headers = {{"X-EXECD-ACCESS-TOKEN", sandbox_token}};
    const std::string base = absl::StrCat("/v1/sandboxes/", agent_id, "/execd/command");
    AgentCommandResult result;
    std::string pending, command_id;
    auto on_event = [&](const json& e) {
      const std::string type = e.value("type", "");
      const std::string text = e.value("text", "");
      if (type == "init") {
        command_id = text;
      } else if (type == "stdout" || type == "stderr") {
        std::string& out = type == "stdout" ? result.stdout_text : result.stderr_text;
        bool& truncated = type == "stdout" ? result.stdout_truncated : result.stderr_truncated;
        // Lines come without their "\n" (an empty one as "\n"); a last line that had none
        // is marked partial (moat's agent), so the output is rebuilt byte for byte.
        std::string line = text == "\n"                ? "\n"
                           : e.value("partial", false) ? text
                                                       : absl::StrCat(text, "\n");
        if (out.size() + line.size() > kMaxCommandOutput) {
          truncated = true;
          line.resize(kMaxCommandOutput - std::min(kMaxCommandOutput, out.size()));
        }
        out += line;
      }
    };
    const absl::Time start = absl::Now();
    httplib::Request req;
    req.method = "POST";
    req.path = base;
    req.headers = headers;
    req.headers.emplace("Content-Type", "application/json");
    req.body = body.dump();
    int status = 0;
    std::string error_body;
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (status != 200) {
        if (error_body.size() < 4096) error_body.append(data, n);
        return true;
      }
      pending.append(data, n);
      size_t end;
      while ((end = pending.find('\n')) != std::string::npos) {
        std::string line = pending.substr(0, end);
        pending.erase(0, end + 1);
        if (!absl::StartsWith(line, "data:")) continue;
        json e = json::parse(line.substr(5), nullptr, false);
        if (e.is_object()) on_event(e);
      }
      return true;
    };
    httplib::Result sent = Call(
        agent, [&](httplib::Client& c) { return http::SendResult(c, req); }, read_timeout);
    if (!sent) {
      return absl::UnavailableError(
          absl::StrCat("running a command: the agent did not answer: ",
                       http::DescribeFailure(sent.error(), "nodes.tls.ca")));
    }
    if (status != 200) {
      sent->body = error_body;
      return FromHttp(sent, "running a command");
    }
    result.wall = absl::Now() - start;
    if (command_id.empty()) {
      return absl::UnavailableError("running a command: the agent's stream had no init event");
    }
    const std::string status_path = absl::StrCat(base, "/status/", command_id);
    absl::StatusOr<json> s =
        StatusBody(Call(agent, [&](httplib::Client& c) { return c.Get(status_path, headers); }));
    if (!s.ok()) return s.status();
    AgentCommandState state = StateFrom(*s);
    result.status = state.status;
    result.exit_code = state.exit_code;
    result.error = state.error;
    if (s->contains("cpu_seconds") && (*s)["cpu_seconds"].is_number()) {
      result.cpu_seconds = (*s)["cpu_seconds"].get<double>();
    }
    auto count = [&](const char* key, std::optional<uint64_t>& out) {
      if (s->contains(key) && (*s)[key].is_number_unsigned()) out = (*s)[key].get<uint64_t>();
    };
    count("peak_memory_bytes", result.peak_memory_bytes);
    count("sandbox_oom_kills", result.oom_kills);
    count("sandbox_pids_limit_hits", result.pids_limit_hits);
    // moat's agent: the sandbox's violations and which stream it cut (it keeps each stream's
    // first 1 MiB, as moat run does, for a run_result command).
    if (s->contains("violations") && (*s)["violations"].is_array()) {
      for (const json& v : (*s)["violations"]) {
        if (!v.is_object() || !v.contains("kind") || !v["kind"].is_string() ||
            !v.contains("detail") || !v["detail"].is_string()) {
          continue;
        }
        result.violations.emplace_back(v["kind"].get<std::string>(),
                                       v["detail"].get<std::string>());
      }
    }
    count("violations_dropped", result.violations_dropped);
    auto flag = [&](const char* key) {
      return s->contains(key) && (*s)[key].is_boolean() && (*s)[key].get<bool>();
    };
    result.stdout_truncated = result.stdout_truncated || flag("stdout_truncated");
    result.stderr_truncated = result.stderr_truncated || flag("stderr_truncated");
    return result;
  }

  absl::StatusOr<std::string> StartCommand(const AgentEndpoint& agent, const std::string& agent_id,
                                           const std::string& sandbox_token,
                                           const AgentCommand& command) override {
    auto res = PostJson(agent, absl::StrCat("/v1/sandboxes/", agent_id, "/execd/command"),
                        {{"X-EXECD-ACCESS-TOKEN", sandbox_token}},
                        CommandBody(command, /*background=*/true).dump());
    if (absl::Status st = FromHttp(res, "starting a command"); !st.ok()) return st;
    // A background command's stream is its init event only: {"type": "init", "text": id}.
    for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
      if (!absl::ConsumePrefix(&line, "data:")) continue;
      json e = json::parse(line, nullptr, false);
      if (e.is_object() && e.value("type", "") == "init" && e.contains("text") &&
          e["text"].is_string()) {
        return e["text"].get<std::string>();
      }
    }
    return absl::UnavailableError("starting a command: the agent's stream had no init event");
  }

  absl::StatusOr<AgentCommandState> CommandState(const AgentEndpoint& agent,
                                                 const std::string& agent_id,
                                                 const std::string& sandbox_token,
                                                 const std::string& command_id) override {
    const std::string path =
        absl::StrCat("/v1/sandboxes/", agent_id, "/execd/command/status/", command_id);
    absl::StatusOr<json> s = StatusBody(Call(agent, [&](httplib::Client& c) {
      return c.Get(path, {{"X-EXECD-ACCESS-TOKEN", sandbox_token}});
    }));
    if (!s.ok()) return s.status();
    return StateFrom(*s);
  }

 private:
  // `call` on a kept-alive connection to the agent (the pool's), with this client's timeouts
  // (the read timeout `read_timeout`, if given).
  httplib::Result Call(const AgentEndpoint& agent,
                       const std::function<httplib::Result(httplib::Client&)>& call,
                       std::optional<absl::Duration> read_timeout = std::nullopt) {
    return pool_->Call({agent.url, agent.ca_file}, [&](httplib::Client& c) {
      int64_t seconds = absl::ToInt64Seconds(timeout_);
      c.set_connection_timeout(5, 0);
      c.set_read_timeout(read_timeout ? absl::ToInt64Seconds(*read_timeout) : seconds, 0);
      c.set_write_timeout(seconds, 0);
      return call(c);
    });
  }
  httplib::Result PostJson(const AgentEndpoint& agent, const std::string& path,
                           const httplib::Headers& headers, const std::string& body) {
    return Call(
        agent, [&](httplib::Client& c) { return c.Post(path, headers, body, "application/json"); });
  }
  static httplib::Headers Headers(const AgentEndpoint& agent) {
    return {{"Authorization", absl::StrCat("Bearer ", agent.token)}};
  }

  absl::Duration timeout_;
  std::unique_ptr<http::ClientPool> own_pool_;  // When none was given.
  http::ClientPool* pool_;
};

}  // namespace

std::unique_ptr<AgentClient> NewHttpAgentClient(absl::Duration timeout, http::ClientPool* pool) {
  return std::make_unique<HttpAgentClient>(timeout, pool);
}

}  // namespace moat::controller
