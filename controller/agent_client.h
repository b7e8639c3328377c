// The controller's side of the agent's node API (api/node-agent.yaml): create, delete and list
// sandboxes on one node. An interface, so the lifecycle is tested with a fake fleet and the
// real client (HTTP, httplib) is tested against a real agent in e2e/controller.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/nodes.h"
#include "nlohmann/json.hpp"

namespace moat::http {
class ClientPool;
}

namespace moat::controller {

struct AgentCreate {
  std::string profile;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> metadata;  // Carries the controller's id (kControllerIdKey).
  absl::Duration ttl;
  // Tighter than the profile's (0: the profile's). Either this or a policy makes the agent start
  // the sandbox cold: its warm pool holds sandboxes made with the profile's limits and policy.
  double cpus = 0;
  uint64_t memory_bytes = 0;
  // A policy document (docs/policy.md) replacing the profile's; null: the profile's.
  nlohmann::json policy;
  // The sandbox's main process, started by the agent before it answers (one call for what was
  // a check and a start through execd); empty: none.
  std::vector<std::string> entrypoint;
};

struct AgentSandbox {
  std::string id;     // The agent's id ("sb-...").
  std::string token;  // Its per-sandbox (execd) token; only from Create.
  std::string state;
  std::string start;  // "warm" or "cold" when the agent says.
  std::map<std::string, std::string> metadata;
  // The execd command id of the entrypoint the create started (AgentCreate::entrypoint). Empty
  // when the agent predates that field: the controller then checks and starts it itself.
  std::string entrypoint_command;
};

// A command for the sandbox's /bin/sh -c (the agent's execd command API).
struct AgentCommand {
  std::string command;
  std::map<std::string, std::string> env;
  absl::Duration timeout = absl::ZeroDuration();  // Zero: none.
  // The CPU time the sandbox may use while the command runs (moat's cpu_timeout extension of
  // execd's request; the agent kills the command past it). Zero: none.
  absl::Duration cpu_timeout = absl::ZeroDuration();
  // POST /v1/run's: the agent keeps each stream's first 1 MiB and settles the sandbox's
  // violations before it reports the end (execd's run_result, moat's extension).
  bool run_result = false;
};

// What it did, as the agent reports it: its output cleaned as `moat run --json` cleans it (the
// agent sends it line by line), capped at kMaxCommandOutput bytes per stream.
struct AgentCommandResult {
  std::string stdout_text, stderr_text;
  bool stdout_truncated = false, stderr_truncated = false;
  // The agent's: exited, signaled, timed_out, interrupted, oom_killed, failed_to_start.
  std::string status;
  std::optional<int> exit_code;  // 128+N for signal N.
  std::string error;             // Why it failed to start.
  absl::Duration wall;           // From the request to the end of the stream.
  // The sandbox cgroup's CPU time across the command and its peak memory (the agent's
  // cpu_seconds and peak_memory_bytes; nullopt when the agent did not report them).
  std::optional<double> cpu_seconds;
  std::optional<uint64_t> peak_memory_bytes;
  // The sandbox's OOM kills and forks refused at its pids limit since it was made.
  std::optional<uint64_t> oom_kills, pids_limit_hits;
  // What the sandbox did against its policy while the command ran, (kind, detail) in moat
  // run's words as the agent reported them, and how many more it did not list.
  std::vector<std::pair<std::string, std::string>> violations;
  std::optional<uint64_t> violations_dropped;
};

// A command's state as the agent's GET .../command/status/{id} reports it.
struct AgentCommandState {
  bool running = true;
  std::string status;            // As AgentCommandResult::status, or "running".
  std::optional<int> exit_code;  // Once it ended; 128+N for signal N.
  std::string error;
};
inline constexpr size_t kMaxCommandOutput = 1 << 20;  // moat run --json's cap.

// The metadata key under which the controller's sandbox id travels to the agent: after a
// controller crash, what an agent runs is matched to the store by it (reconcile).
inline constexpr char kControllerIdKey[] = "moat.controller/id";
// And which placement attempt made it: a Pending sandbox's copy from an attempt that is not the
// one in flight (a leader that died between the agent's create and the store's write) is an
// orphan, so a sandbox placed again after a failover runs once.
inline constexpr char kAttemptKey[] = "moat.controller/attempt";

class AgentClient {
 public:
  virtual ~AgentClient() = default;
  // InvalidArgument if the request's entrypoint is not a program the sandbox can run (the agent
  // made no sandbox); other errors: this node failed, another may not.
  virtual absl::StatusOr<AgentSandbox> Create(const AgentEndpoint& agent,
                                              const AgentCreate& request) = 0;
  // NotFound if the agent has no such sandbox (already gone: callers treat it as done).
  virtual absl::Status Delete(const AgentEndpoint& agent, const std::string& agent_id) = 0;
  virtual absl::StatusOr<std::vector<AgentSandbox>> List(const AgentEndpoint& agent) = 0;
  // The agent ends the sandbox `ttl` from now (its own expiry, in case the controller is gone).
  virtual absl::Status Renew(const AgentEndpoint& agent, const std::string& agent_id,
                             absl::Duration ttl) = 0;
  // The cgroup freezer: every process of the sandbox stops (Pause) or goes on (Resume).
  virtual absl::Status Pause(const AgentEndpoint& agent, const std::string& agent_id) = 0;
  virtual absl::Status Resume(const AgentEndpoint& agent, const std::string& agent_id) = 0;
  // Runs `command` in the sandbox (its own token: `sandbox_token`) and waits for its end.
  virtual absl::StatusOr<AgentCommandResult> RunCommand(const AgentEndpoint& agent,
                                                        const std::string& agent_id,
                                                        const std::string& sandbox_token,
                                                        const AgentCommand& command) = 0;
  // Starts `command` in the background (execd's background: true) and returns its id at once.
  virtual absl::StatusOr<std::string> StartCommand(const AgentEndpoint& agent,
                                                   const std::string& agent_id,
                                                   const std::string& sandbox_token,
                                                   const AgentCommand& command) = 0;
  // What became of a command StartCommand started. NotFound if the agent no longer knows it.
  virtual absl::StatusOr<AgentCommandState> CommandState(const AgentEndpoint& agent,
                                                         const std::string& agent_id,
                                                         const std::string& sandbox_token,
                                                         const std::string& command_id) = 0;
};

// Over HTTP(S) with the agent's node token. Each call has `timeout`. Calls reuse kept-alive
// connections to each agent from `pool` (shared with the proxy, so a command after a create
// finds its connection open); null: a pool of the client's own.
std::unique_ptr<AgentClient> NewHttpAgentClient(absl::Duration timeout = absl::Seconds(60),
                                                http::ClientPool* pool = nullptr);

}  // namespace moat::controller
