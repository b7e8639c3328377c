// The agent's side of joining a moat-controller (docs/controller.md, "Joining"): a background
// thread that joins with the join token's proof (node-agent/join_auth.h), checks the
// controller's proof back before it sends anything secret, then sends a heartbeat every
// interval with what the node has (architecture, kernel, cgroup version, capacity and usage,
// warm sandboxes per profile, labels and taints). A heartbeat the controller refuses (it
// restarted, or gave the node up as lost) makes the link join again. An agent that stops and
// leaves its sandboxes to the next one says so in a last heartbeat (Leave).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "node-agent/config/limits.h"

namespace moat::agent {

struct ControllerLinkOptions {
  std::string controller_url;  // http(s)://host:port
  std::string join_token;
  std::string node_name;
  absl::Duration interval = absl::Seconds(5);
  std::string ca_file;  // Verifies an https:// controller; empty: the system's CAs.
};

// What the node reports; the callback is called on the link's thread before every message.
using NodeReportFn = std::function<nlohmann::json()>;

class ControllerLink {
 public:
  ControllerLink(ControllerLinkOptions options, NodeReportFn report);
  ~ControllerLink();  // Stops the thread.

  void Start();
  void Stop();
  // Stops, then tells the controller the node's sandboxes stay for `away` (the restart grace)
  // for the next agent: the controller schedules nothing there meanwhile and does not give the
  // node up as lost before that. Nothing is sent unless the link had joined.
  void Leave(absl::Duration away);
  // Joined and the last heartbeat was accepted (tests).
  bool Healthy() const;
  // One join; the session token. Exposed for tests.
  absl::StatusOr<std::string> Join();
  // `away`: see Leave; zero for an ordinary heartbeat.
  absl::Status Heartbeat(const std::string& session, absl::Duration away = absl::ZeroDuration());

 private:
  void Loop();

  const ControllerLinkOptions options_;
  NodeReportFn report_;
  std::thread thread_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  bool healthy_ ABSL_GUARDED_BY(mu_) = false;
  // The last join's session until the controller refuses it (a heartbeat that failed otherwise,
  // a timeout, leaves it valid): what Leave sends with.
  std::string session_ ABSL_GUARDED_BY(mu_);
};

// The agent's report: the fields the controller's ParseHeartbeat reads.
struct NodeFacts {
  std::string agent_url, agent_token, version;
  double cpu = 0, cpu_allocated = 0;
  uint64_t memory = 0, memory_used = 0, pids = 0, pids_used = 0;
  std::vector<std::string> profiles;
  std::map<std::string, Limits> profile_limits;  // The most a sandbox of each profile may have.
  std::map<std::string, int> warm;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> taints;  // key -> value ("" for any)
};
nlohmann::json NodeReportJson(const NodeFacts& facts);  // Adds arch, kernel (uname), cgroup.

}  // namespace moat::agent
