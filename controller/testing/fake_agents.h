// An in-process fleet of agents for tests and the scheduling bench: Create/Delete/List/Renew/
// Pause/Resume and commands act on per-node maps; failures can be injected per node. A create is
// "warm" when it asks for the profile's defaults (no limits, no policy), as on a real agent. A
// create with an entrypoint checks it (the result SetCommandResult gave) and starts it, as the
// agent's node API does, unless SetOldAgents made the fleet one that predates that field.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "controller/agent_client.h"
#include "util/shell_command.h"

namespace moat::controller::testing {

class FakeAgents final : public AgentClient {
 public:
  absl::StatusOr<AgentSandbox> Create(const AgentEndpoint& agent,
                                      const AgentCreate& request) override {
    std::function<void(const std::string&)> hook;
    {
      absl::MutexLock lock(&mu_);
      hook = std::exchange(on_create_, nullptr);
    }
    if (hook) hook(agent.url);  // Outside the lock: it may call back into the fleet.
    AgentSandbox s;
    std::function<void(const std::string&)> after;
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      ++creates_[agent.url];
      if (failing_.contains(agent.url)) {
        return absl::UnavailableError(absl::StrCat("agent ", agent.url, " is failing"));
      }
      const bool warm = request.cpus == 0 && request.memory_bytes == 0 && request.policy.is_null();
      s = AgentSandbox{absl::StrCat("sb-", ++next_), absl::StrCat("token-", next_), "running",
                       warm ? "warm" : "cold", request.metadata};
      last_create_ = request;
      if (!request.entrypoint.empty() && !old_agents_) {
        last_command_ = AgentCommand{.command = EntrypointCheckCommand(request.entrypoint[0]),
                                     .env = request.env};
        if (command_result_.has_value() && command_result_->status != "exited") {
          return absl::UnavailableError(
              absl::StrCat("creating a sandbox: the check ended ", command_result_->status));
        }
        if (command_result_.has_value() && command_result_->exit_code.value_or(-1) != 0) {
          return absl::InvalidArgumentError(EntrypointNotRunnableMessage(request.entrypoint[0]));
        }
        s.entrypoint_command = StartLocked(
            s.id, AgentCommand{.command = ExecCommand(request.entrypoint), .env = request.env});
      }
      running_[agent.url][s.id] = s;
      after = std::exchange(after_create_, nullptr);
    }
    if (after) after(agent.url);  // Outside the lock too.
    return s;
  }
  absl::Status Delete(const AgentEndpoint& agent, const std::string& id) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (running_[agent.url].erase(id) == 0) return absl::NotFoundError("no such sandbox");
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<AgentSandbox>> List(const AgentEndpoint& agent) override {
    absl::MutexLock lock(&mu_);
    std::vector<AgentSandbox> out;
    for (const auto& [id, s] : running_[agent.url]) out.push_back(s);
    return out;
  }
  absl::Status Renew(const AgentEndpoint& agent, const std::string& id,
                     absl::Duration ttl) override {
    absl::MutexLock lock(&mu_);
    if (!running_[agent.url].contains(id)) return absl::NotFoundError("no such sandbox");
    ttls_[id] = ttl;
    return absl::OkStatus();
  }

  absl::Status Pause(const AgentEndpoint& agent, const std::string& id) override {
    return SetPaused(agent, id, true);
  }
  absl::Status Resume(const AgentEndpoint& agent, const std::string& id) override {
    return SetPaused(agent, id, false);
  }

  // Answers with the result SetCommandResult gave (by default: the command echoed, exit 0).
  absl::StatusOr<AgentCommandResult> RunCommand(const AgentEndpoint& agent, const std::string& id,
                                                const std::string& token,
                                                const AgentCommand& command) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (!running_[agent.url].contains(id)) return absl::NotFoundError("no such sandbox");
    if (running_[agent.url][id].token != token) return absl::UnauthenticatedError("wrong token");
    last_command_ = command;
    if (command_result_.has_value()) return *command_result_;
    AgentCommandResult r;
    r.stdout_text = command.command + "\n";
    r.status = "exited";
    r.exit_code = 0;
    return r;
  }

  // Background commands: each starts "running" until EndCommand.
  absl::StatusOr<std::string> StartCommand(const AgentEndpoint& agent, const std::string& id,
                                           const std::string& token,
                                           const AgentCommand& command) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (!running_[agent.url].contains(id)) return absl::NotFoundError("no such sandbox");
    if (running_[agent.url][id].token != token) return absl::UnauthenticatedError("wrong token");
    if (failing_.contains(agent.url)) {
      return absl::UnavailableError(absl::StrCat("agent ", agent.url, " is failing"));
    }
    return StartLocked(id, command);
  }
  absl::StatusOr<AgentCommandState> CommandState(const AgentEndpoint& agent, const std::string& id,
                                                 const std::string& token,
                                                 const std::string& command_id) override {
    absl::MutexLock lock(&mu_);
    ++state_reads_;
    if (!running_[agent.url].contains(id)) return absl::NotFoundError("no such sandbox");
    auto it = started_.find(command_id);
    if (it == started_.end() || it->second.sandbox != id) {
      return absl::NotFoundError("no such command");
    }
    return it->second.state;
  }
  // The background command `command_id` ends with `exit_code`.
  void EndCommand(const std::string& command_id, int exit_code) {
    absl::MutexLock lock(&mu_);
    AgentCommandState& state = started_[command_id].state;
    state = {false, exit_code > 128 ? "signaled" : "exited", exit_code, ""};
  }
  // Agents older than AgentCreate::entrypoint: a create does not start it (the HTTP client's
  // answer once such an agent refused the field and was asked again without it).
  void SetOldAgents(bool old) {
    absl::MutexLock lock(&mu_);
    old_agents_ = old;
  }
  // Calls of the fleet's sandboxes and commands (Create, Delete, RunCommand, StartCommand) so
  // far: what a create costs in requests to an agent.
  int Calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  // The last background command started: its id, and what it ran.
  std::string LastStarted() {
    absl::MutexLock lock(&mu_);
    return last_started_;
  }
  AgentCommand StartedCommand(const std::string& command_id) {
    absl::MutexLock lock(&mu_);
    return started_[command_id].command;
  }
  int StateReads() {
    absl::MutexLock lock(&mu_);
    return state_reads_;
  }

  void SetCommandResult(AgentCommandResult result) {
    absl::MutexLock lock(&mu_);
    command_result_ = std::move(result);
  }
  AgentCommand LastCommand() {
    absl::MutexLock lock(&mu_);
    return last_command_;
  }

  // Runs once, at the start of the next Create (a race to stage: something happening while an
  // agent creates).
  void SetOnCreate(std::function<void(const std::string& url)> hook) {
    absl::MutexLock lock(&mu_);
    on_create_ = std::move(hook);
  }

  // Runs once, after the next Create made its sandbox and before it answers (something
  // happening while the controller has yet to hear back).
  void SetAfterCreate(std::function<void(const std::string& url)> hook) {
    absl::MutexLock lock(&mu_);
    after_create_ = std::move(hook);
  }

  void SetFailing(const std::string& url, bool failing) {
    absl::MutexLock lock(&mu_);
    if (failing) {
      failing_.insert(url);
    } else {
      failing_.erase(url);
    }
  }
  int Running(const std::string& url) {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(running_[url].size());
  }
  int Creates(const std::string& url) {
    absl::MutexLock lock(&mu_);
    return creates_[url];
  }
  // A sandbox the agent runs that the controller did not ask for (a crash's orphan).
  // `attempt`: the placement attempt it carries (kAttemptKey), if any.
  void AddOrphan(const std::string& url, const std::string& controller_id,
                 const std::string& attempt = "") {
    absl::MutexLock lock(&mu_);
    AgentSandbox s{absl::StrCat("sb-orphan-", ++next_), "", "running", "", {}};
    s.metadata[kControllerIdKey] = controller_id;
    if (!attempt.empty()) s.metadata[kAttemptKey] = attempt;
    running_[url][s.id] = s;
  }
  void Vanish(const std::string& url) {
    absl::MutexLock lock(&mu_);
    running_[url].clear();
  }
  bool Paused(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return paused_.contains(id);
  }
  AgentCreate LastCreate() {
    absl::MutexLock lock(&mu_);
    return last_create_;
  }
  absl::Duration Ttl(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return ttls_[id];
  }

 private:
  absl::Status SetPaused(const AgentEndpoint& agent, const std::string& id, bool paused) {
    absl::MutexLock lock(&mu_);
    if (failing_.contains(agent.url)) {
      return absl::UnavailableError(absl::StrCat("agent ", agent.url, " is failing"));
    }
    if (!running_[agent.url].contains(id)) return absl::NotFoundError("no such sandbox");
    if (paused) {
      paused_.insert(id);
    } else {
      paused_.erase(id);
    }
    return absl::OkStatus();
  }

  std::string StartLocked(const std::string& sandbox, const AgentCommand& command)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string command_id = absl::StrCat("cmd-", ++next_);
    started_[command_id] = {sandbox, command, AgentCommandState{true, "running", std::nullopt, ""}};
    last_started_ = command_id;
    return command_id;
  }

  absl::Mutex mu_;
  int next_ ABSL_GUARDED_BY(mu_) = 0;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool old_agents_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::map<std::string, AgentSandbox>> running_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> creates_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Duration> ttls_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> failing_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> paused_ ABSL_GUARDED_BY(mu_);
  AgentCreate last_create_ ABSL_GUARDED_BY(mu_);
  AgentCommand last_command_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_create_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&)> after_create_ ABSL_GUARDED_BY(mu_);
  std::optional<AgentCommandResult> command_result_ ABSL_GUARDED_BY(mu_);
  struct Started {
    std::string sandbox;
    AgentCommand command;
    AgentCommandState state;
  };
  std::map<std::string, Started> started_ ABSL_GUARDED_BY(mu_);
  std::string last_started_ ABSL_GUARDED_BY(mu_);
  int state_reads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace moat::controller::testing
