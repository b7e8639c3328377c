// The fleet as the controller knows it: nodes that joined, their last heartbeat, and the
// capacity the controller has reserved on each. In memory only, by design: heartbeats arrive
// every 5 s from every node and must never become durable writes (issue 12); after a controller
// restart the agents re-join within one heartbeat and report themselves again.
//
// Node states follow scheduler::NodeState (drawn in scheduler/framework.h): Tick() moves a node
// to NotReady after `misses` heartbeat intervals without one, and to Lost after `lost_after`. An
// agent that stops and leaves its sandboxes to the next one (an upgrade, a DaemonSet rollout)
// says for how long: until then the node is NotReady (nothing new goes there) but never Lost,
// so its sandboxes are not given up while the next agent re-adopts them.
//
// Locking: one mutex guards every node. The scheduler reads immutable snapshots (Snapshot());
// a decision made on a snapshot is confirmed by Reserve(), which re-checks the fit against the
// live numbers under the lock, so concurrent creates never overbook a node.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/scheduler/framework.h"
#include "util/clock.h"

namespace moat::controller {

// What an agent reports about itself when it joins and in every heartbeat.
struct NodeReport {
  std::string agent_url;    // Where the controller reaches the agent's node API.
  std::string agent_token;  // The agent's node API token (sent only after the controller proved
                            // itself: see docs/controller.md, "Joining").
  std::string arch;         // uname -m.
  std::string kernel;       // uname -r.
  std::string cgroup;       // "v1", "v2" or "hybrid".
  std::string version;      // moat-agent's.
  scheduler::Resources allocatable;
  scheduler::Resources used;  // Memory and pids in use, CPU quota allocated on the node.
  std::vector<std::string> profiles;
  // The most a sandbox of each profile may have (cpu, memory; pids unused): a request tighter
  // than this is sent to the agent, which then starts it cold.
  std::map<std::string, scheduler::Resources> profile_limits;
  std::map<std::string, int> warm;  // Ready warm sandboxes per profile.
  std::map<std::string, std::string> labels;
  std::vector<scheduler::Taint> taints;
};

// One node as the API shows it.
struct NodeView {
  std::string name;
  NodeReport report;
  scheduler::NodeState state;
  bool cordoned = false;
  bool draining = false;
  scheduler::Resources allocated;
  int sandboxes = 0;
  absl::Time joined_at, last_heartbeat;
  // While its agent restarts (Heartbeat's `away`): until when; else InfinitePast.
  absl::Time away_until = absl::InfinitePast();
};

struct NodeTableOptions {
  absl::Duration heartbeat_interval = absl::Seconds(5);
  int misses = 3;
  absl::Duration lost_after = absl::Seconds(30);
  scheduler::Overcommit overcommit;
  std::string agent_ca_file;  // Verifies agents' https:// URLs (nodes.tls.ca); empty: system CAs.
};

// How to reach one node's agent.
struct AgentEndpoint {
  std::string url;
  std::string token;
  std::string ca_file;  // Verifies an https:// url; empty: the system's CAs.
};

class NodeTable {
 public:
  NodeTable(const Clock* clock, NodeTableOptions options) : clock_(clock), options_(options) {}

  // A node joins (or re-joins, e.g. after a restart of either side): Ready, with a new session
  // token for its heartbeats. A re-join keeps the node's cordon and its reservations (the
  // reconciler decides what still runs there).
  absl::StatusOr<std::string> Join(const std::string& name, NodeReport report);
  // True for the first heartbeat after a join (the first to carry the agent's token: the node
  // can now be reconciled). Unauthenticated (wrong or stale session token) or NotFound (not
  // joined, or lost: join again). A non-zero `away` is the agent's last heartbeat before a
  // restart that keeps its sandboxes: NotReady at once, not Lost before `away` has passed (or
  // `lost_after` since this heartbeat, whichever is later); the next join or heartbeat ends it.
  absl::StatusOr<bool> Heartbeat(const std::string& name, absl::string_view session_token,
                                 NodeReport report, absl::Duration away = absl::ZeroDuration());
  // Applies the clock: Ready -> NotReady -> Lost. Returns the nodes that became Lost just now.
  std::vector<std::string> Tick();
  // Forgets every node: their heartbeats get NotFound and they join again. For a replica whose
  // table went stale while another led (its nodes would all look silent, hence lost).
  void Clear();

  absl::Status SetCordoned(const std::string& name, bool cordoned);
  absl::Status SetDraining(const std::string& name);  // Cordons too.

  // The fleet for the scheduler; rebuilt only when something changed since the last call.
  scheduler::SnapshotPtr Snapshot();
  // Holds `resources` on the node for a sandbox of `tenant`, if they still fit (the snapshot a
  // decision saw may be stale). ResourceExhausted (with the reason) or NotFound if not.
  absl::Status Reserve(const std::string& node, const std::string& tenant,
                       const scheduler::Resources& resources);
  void Release(const std::string& node, const std::string& tenant,
               const scheduler::Resources& resources);

  absl::StatusOr<AgentEndpoint> Endpoint(const std::string& node) const;
  std::vector<NodeView> List() const;
  std::optional<NodeView> Get(const std::string& name) const;
  // Whether any node (in any state) ever reported this architecture: a request for one no node
  // has is a 400, not a Pending sandbox.
  bool AnyNodeHasArch(absl::string_view arch) const;
  std::map<std::pair<std::string, std::string>, int> CountByStateAndArch() const;

 private:
  struct Node {
    NodeReport report;
    std::string session_token;
    scheduler::NodeState state = scheduler::NodeState::kReady;
    bool cordoned = false, draining = false;
    scheduler::Resources allocated;
    std::map<std::string, int> tenant_sandboxes;
    absl::Time joined_at, last_heartbeat;
    absl::Time away_until = absl::InfinitePast();
    std::shared_ptr<const scheduler::NodeInfo> info;  // What snapshots share; remade on change.
  };
  // The state the scheduler, the API and the metrics see: NotReady until the first heartbeat
  // brings the agent's token (before it the controller cannot call the agent), else its own.
  static scheduler::NodeState SeenState(const Node& node);
  // After any change to `node`: its NodeInfo is remade and the fleet snapshot is stale.
  void ChangedLocked(const std::string& name, Node& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  NodeView ViewLocked(const std::string& name, const Node& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* clock_;
  const NodeTableOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  scheduler::SnapshotPtr snapshot_ ABSL_GUARDED_BY(mu_);  // Null when stale.
};

}  // namespace moat::controller
