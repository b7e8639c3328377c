// The agent's end-to-end harness: runs the real `moat-agent` binary as a separate process with a
// config the test writes, talks to it over HTTP on loopback, and gives the tests what they need
// to check the host afterwards (processes, cgroups, mounts, the agent's descriptors and memory).
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "e2e/time_scale.h"  // Scaled(), Rounds(): the tests' waits under emulation

namespace httplib {
class Client;
}

namespace moat::e2e {

// The moat-agent binary ($MOAT_AGENT_BIN, else the one this suite was built with).
const std::string& AgentBinary();

struct AgentSetup {
  int pool_floor = 0;
  int pool_ceiling = 4;
  std::string heartbeat = "5s";  // heartbeat.interval
  std::string limits = "{cpus: 1, memory: 256MiB, pids: 128, workspace: 64MiB}";
  // restart_grace: "0s" (the sandboxes end with the agent) unless a test keeps them.
  std::string restart_grace = "0s";
  // Start the agent in cgroups of its own in every hierarchy, as a container runtime starts a
  // container (AgentProcess::KillContainer ends it as one stops it).
  bool in_container = false;
  // Where the config (agent.yaml, readable to all as a pod's ConfigMap is) and the node token
  // (token, owner-only) are written: a directory the sandboxes' root shows, unlike /var/tmp; made
  // and removed with the agent. Empty: the agent's directory under /var/tmp, both owner-only.
  std::string config_dir;
};

// What one command printed, through the SSE stream of POST .../execd/command.
struct CommandRun {
  int http_status = 0;
  std::string stdout_text, stderr_text;
  std::vector<nlohmann::json> events;
  bool completed = false;  // an execution_complete event came
  std::string error;       // an error event's text, if any
};

// One agent process and its state directory (under /var/tmp, removed at the end).
class AgentProcess {
 public:
  // Writes the config and token and starts the agent. `state_dir`: reuse one (a restart after a
  // crash); empty: a new one.
  static absl::StatusOr<std::unique_ptr<AgentProcess>> Start(const AgentSetup& setup,
                                                             const std::string& state_dir = "");
  ~AgentProcess();  // SIGTERM, wait; removes the directory unless kept (KeepDirectory)

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& dir() const { return dir_; }
  // Where its config (agent.yaml) and token (token) are: AgentSetup::config_dir, else dir().
  const std::string& config_dir() const { return config_dir_; }
  const std::string& NodeToken() const { return node_token_; }
  std::string Log() const;  // what the agent wrote to stderr so far
  void KeepDirectory() { keep_dir_ = true; }

  // Kills the agent with `signal` and reaps it (its log stays readable).
  void Kill(int signal);
  // SIGTERM and wait; returns the exit status.
  int Stop();
  // Ends the agent's stand-in container (AgentSetup::in_container) as runc's `kill --all` does:
  // SIGKILL to every process listed in the container's cgroups, until none is; then reaps the
  // agent and removes the cgroups. What is to outlive the agent must have left them.
  void KillContainer();

  // The node API with the node token. Returns (status, parsed body or null).
  std::pair<int, nlohmann::json> Node(const std::string& method, const std::string& path,
                                      const std::string& body = "");
  std::string Metrics();
  // Creates a sandbox; returns {id, token} or an error.
  absl::StatusOr<std::pair<std::string, std::string>> CreateSandbox(
      const std::string& body = R"({"profile": "default", "ttl_seconds": 600})");
  // Runs a command through the per-sandbox API on `client` (one per thread; nullptr: a new one).
  CommandRun Run(const std::string& id, const std::string& token, const std::string& command,
                 httplib::Client* client = nullptr, const std::string& extra_json = "");
  // The same for any streaming route of the per-sandbox API (e.g. "/session/<id>/run").
  CommandRun RunAt(const std::string& id, const std::string& token, const std::string& route,
                   const nlohmann::json& body, httplib::Client* client = nullptr);
  std::unique_ptr<httplib::Client> NewClient() const;

 private:
  AgentProcess() = default;

  void RemoveContainer();

  pid_t pid_ = -1;
  int port_ = 0;
  std::vector<std::string> container_;  // the stand-in container's cgroups, one per hierarchy
  std::string dir_, state_dir_, node_token_, log_path_;
  std::string config_dir_;
  bool keep_dir_ = false;
};

// What a test checks on the host after sandboxes are gone.
struct HostSnapshot {
  int mounts = 0;                         // lines of /proc/self/mountinfo
  std::vector<std::string> moat_cgroups;  // sandbox cgroups under every hierarchy's moat/
};
HostSnapshot SnapshotHost();
// Sandbox cgroups ("<pid>-sb-...") of the agent `agent_pid`, in every hierarchy.
std::vector<std::string> AgentCgroups(pid_t agent_pid);
// Pids of host processes whose command line contains `marker`.
std::vector<pid_t> ProcessesWith(const std::string& marker);
// The same, only those in a sandbox cgroup of the agent `agent_pid` (not another test's agent
// running beside this one under ctest -j).
std::vector<pid_t> ProcessesWith(const std::string& marker, pid_t agent_pid);
// Descriptors the process holds, and its resident memory in KiB.
int OpenFds(pid_t pid);
long RssKib(pid_t pid);
// Pids of the moat-probe processes of sandbox `id`.
std::vector<pid_t> ProbesOf(const std::string& id);

// A real agent with one sandbox, for tests of one sandbox's execd API. Skips without root, or
// when the host root (which the sandboxes run) has no `program`.
class OneSandboxTest : public ::testing::Test {
 protected:
  explicit OneSandboxTest(std::string program) : program_(std::move(program)) {}
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the agent makes real sandboxes: run as root";
    if (::access(AgentBinary().c_str(), X_OK) != 0) FAIL() << "no moat-agent at " << AgentBinary();
    if (::access(program_.c_str(), X_OK) != 0) GTEST_SKIP() << "the host root has no " << program_;
    absl::StatusOr<std::unique_ptr<AgentProcess>> agent = AgentProcess::Start({});
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    auto sandbox = agent_->CreateSandbox();
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    std::tie(id_, token_) = *sandbox;
  }

  std::unique_ptr<AgentProcess> agent_;
  std::string id_, token_;

 private:
  const std::string program_;
};

}  // namespace moat::e2e
