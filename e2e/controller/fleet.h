// A fleet on one machine for the controller's end-to-end tests: the real moat-controller and
// real moat-agent processes (each with its own state directory and loopback port), configs the
// test writes, and an HTTP client for the controller's API.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/testing/test_ca.h"

namespace httplib {
class Client;
}  // namespace httplib

namespace moat::e2e {

// A daemon started from a config file; its stderr goes to a log in its directory.
class Daemon {
 public:
  ~Daemon();  // SIGTERM, wait.
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string Log() const;
  void Kill(int signal);  // And reap.

 protected:
  friend class Fleet;
  absl::Status Spawn(const std::string& binary, std::vector<std::string> args,
                     const std::string& log_path);
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

struct AgentOptions {
  std::string name;
  int pool_floor = 1;
  std::map<std::string, std::string> labels;
  // With UseTls: the CA this agent verifies the controller with; empty: the fleet's CA.
  std::string controller_ca;
  bool wait_until_ready = true;  // false: StartAgent returns once the process started.
};

class Fleet {
 public:
  // A directory under /var/tmp with the join token and API keys; removed at the end.
  static absl::StatusOr<std::unique_ptr<Fleet>> Create();
  ~Fleet();

  // Starts (or restarts, on the same state directory) the controller; waits for /health.
  absl::Status StartController();
  // Starts an agent joined to the controller; waits until the controller lists it Ready.
  absl::Status StartAgent(const AgentOptions& options);

  Daemon& controller() { return *controller_; }

  // Several replicas on an etcd store (issue 13): replica i gets its own port and state
  // directory and fast leader-election timings (lease 6 s); Call and new agents talk to the
  // replica chosen by Target (the first by default).
  absl::Status StartReplica(int i, const std::vector<std::string>& etcd_endpoints);
  Daemon& replica(int i) { return *replicas_.at(i); }
  void Target(int i) { controller_port_ = replica_ports_.at(i); }
  std::pair<int, nlohmann::json> CallReplica(int i, const std::string& method,
                                             const std::string& path, const std::string& body = "",
                                             std::map<std::string, std::string>* headers = nullptr);
  Daemon& agent(const std::string& name) { return *agents_.at(name); }
  const std::string& api_key() const { return api_key_; }
  const std::string& dir() const { return dir_; }
  // The moat CLI (MOAT_BIN, else beside moat-agent).
  static std::string MoatBinary();
  const std::string& admin_key() const { return admin_key_; }
  // YAML lines added to the controller's config at the next StartController or StartReplica.
  void set_extra_config(std::string yaml) { extra_config_ = std::move(yaml); }
  // TLS both ways, from the next StartController and StartAgent: the controller and the agents
  // serve https with the CA's server certificate (which must name IP:127.0.0.1); agents verify
  // the controller with `controller.tls.ca`, the controller its agents with `nodes.tls.ca`
  // (`nodes_ca`, default the CA); Call, CallWith and AgentCall verify against the CA too.
  void UseTls(const moat::testing::TestCa& ca, std::string nodes_ca = "") {
    tls_ = ca;
    nodes_ca_ = nodes_ca.empty() ? ca.ca_pem : std::move(nodes_ca);
  }

  // The controller's API with the API key: (status, body parsed or null).
  std::pair<int, nlohmann::json> Call(const std::string& method, const std::string& path,
                                      const std::string& body = "");
  // The same with other headers in place of the API key (another tenant's key, the admin's).
  std::pair<int, nlohmann::json> CallWith(const std::map<std::string, std::string>& headers,
                                          const std::string& method, const std::string& path,
                                          const std::string& body = "");
  // The agent's node API with its node token.
  std::pair<int, nlohmann::json> AgentCall(const std::string& name, const std::string& method,
                                           const std::string& path);
  // The node's state as the controller lists it ("" if not listed).
  std::string NodeState(const std::string& name);
  // Polls `check` until it is true or `timeout`, scaled (e2e/time_scale.h), passes.
  static bool WaitFor(const std::function<bool()>& check, absl::Duration timeout);

 private:
  std::string dir_, api_key_, join_token_file_, keys_file_, admin_key_, extra_config_;
  std::unique_ptr<Daemon> controller_;
  int controller_port_ = 0;
  std::map<std::string, std::unique_ptr<Daemon>> agents_;
  std::map<int, std::unique_ptr<Daemon>> replicas_;
  std::map<int, int> replica_ports_;
  std::map<std::string, std::string> agent_tokens_;
  std::optional<moat::testing::TestCa> tls_;
  std::string nodes_ca_;

  // A client of the controller (or of the agent) on `port`, speaking what it serves.
  std::unique_ptr<httplib::Client> ClientOf(int port, bool controller = true) const;
};

// The create body of most tests: a sandbox that runs until deleted, small enough for several on
// one agent.
inline constexpr char kCreate[] =
    R"({"image": {"uri": "python:3.11"}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 600,
        "resourceLimits": {"cpu": "250m", "memory": "128Mi"}})";

// The fixture of the controller's end-to-end suites: skipped without root (the agents make real
// sandboxes); each test gets a fleet of its own, in which the suite's StartFleet starts what its
// tests share (a controller, agents). A skip or a failure there skips or fails the test.
class FleetTest : public ::testing::Test {
 protected:
  void SetUp() final;
  virtual void StartFleet() {}
  // The sandboxes the agent `name` runs that carry a controller id: agent id -> controller id.
  std::map<std::string, std::string> AgentSandboxes(const std::string& name);

  std::unique_ptr<Fleet> fleet_;
};

}  // namespace moat::e2e
