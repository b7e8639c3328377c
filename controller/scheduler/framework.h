// The scheduler framework, in the style of Kubernetes': a decision runs filter plugins (can the
// sandbox go to this node at all?) and then score plugins (how good a home is it, 0 to 100) on
// an immutable snapshot of the fleet. Plugins are pure functions of (request, node, snapshot):
// no locks, no clocks, no I/O, so each is tested on its own and decisions are reproducible.
// One file per plugin beside this one; scheduler.h runs them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace moat::controller::scheduler {

struct Resources {
  double cpu = 0;       // Cores.
  uint64_t memory = 0;  // Bytes.
  uint64_t pids = 0;

  Resources& operator+=(const Resources& o) {
    cpu += o.cpu;
    memory += o.memory;
    pids += o.pids;
    return *this;
  }
  Resources& operator-=(const Resources& o);  // Saturates at zero.
};

// Allocatable capacity is multiplied by these before requests are fitted (scheduling.overcommit
// in the config): sandboxes rarely use their limits, E2B overcommits CPU 4x. Memory stays 1x by
// default because it cannot be taken back from a process without killing it.
struct Overcommit {
  double cpu = 4;
  double memory = 1;
  double pids = 1;
};

// Kubernetes' node lifecycle, simplified:
//
//   join ──▶ Ready ──(heartbeat_misses missed)──▶ NotReady ──(lost_after)──▶ Lost
//              ▲                                     │
//              └────────────(heartbeat)──────────────┘
//
// Only Ready nodes take new sandboxes. A Lost node's sandboxes are Failed (NODE_LOST).
enum class NodeState { kReady, kNotReady, kLost };
absl::string_view NodeStateName(NodeState state);

// A taint keeps sandboxes off a node unless they tolerate it (effect NoSchedule only).
struct Taint {
  std::string key;
  std::string value;  // Empty: any value.
};
// Tolerates taints with this key (and this value, unless value is empty).
struct Toleration {
  std::string key;
  std::string value;
};

struct NodeInfo {
  std::string name;
  std::string arch;  // "x86_64" or "aarch64" (uname -m; "amd64"/"arm64" are normalised to these).
  NodeState state = NodeState::kReady;
  bool cordoned = false;
  Resources allocatable;           // As the agent reports it, before overcommit.
  Resources allocated;             // Reserved by the controller: placed and being placed sandboxes.
  std::set<std::string> profiles;  // Profiles the agent serves.
  std::map<std::string, int> warm;  // Ready warm sandboxes per profile.
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  std::map<std::string, int> tenant_sandboxes;  // Sandboxes per tenant on this node.
};

struct SandboxRequest {
  std::string tenant;
  std::string profile;
  std::string arch;  // Empty: any architecture.
  Resources resources;
  std::map<std::string, std::string> node_selector;  // Every label must match.
  std::vector<Toleration> tolerations;
  std::set<std::string> excluded_nodes;  // Nodes that already failed this request.
};

// The fleet as one decision sees it; never changes once made (shared by concurrent decisions).
// Nodes are shared between snapshots: a change to one node makes a new NodeInfo for it only, so
// taking a snapshot of 1000 nodes copies 1000 pointers, not 1000 nodes.
struct Snapshot {
  std::vector<std::shared_ptr<const NodeInfo>> nodes;
  Overcommit overcommit;

  // For tests and tools: a snapshot of these nodes.
  static Snapshot Of(std::vector<NodeInfo> nodes, Overcommit overcommit = {}) {
    Snapshot s;
    s.overcommit = overcommit;
    for (NodeInfo& n : nodes) s.nodes.push_back(std::make_shared<const NodeInfo>(std::move(n)));
    return s;
  }
};
using SnapshotPtr = std::shared_ptr<const Snapshot>;

// Why a node does not fit: a short phrase that reads after a count, as in Kubernetes'
// "0/3 nodes are available: 2 insufficient memory, 1 no arm64". Empty: it fits.
struct FilterResult {
  std::string reason;
  bool fits() const { return reason.empty(); }
};

class FilterPlugin {
 public:
  virtual ~FilterPlugin() = default;
  virtual absl::string_view Name() const = 0;
  virtual FilterResult Filter(const SandboxRequest& request, const NodeInfo& node,
                              const Snapshot& snapshot) const = 0;
};

class ScorePlugin {
 public:
  virtual ~ScorePlugin() = default;
  virtual absl::string_view Name() const = 0;
  // 0 (worst) to 100 (best), for a node that passed every filter.
  virtual int Score(const SandboxRequest& request, const NodeInfo& node,
                    const Snapshot& snapshot) const = 0;
};

// The plugins, one file each.
std::unique_ptr<FilterPlugin> NewNodeReadyFilter();        // node_ready.cc
std::unique_ptr<FilterPlugin> NewArchFilter();             // arch.cc
std::unique_ptr<FilterPlugin> NewResourcesFitFilter();     // resources_fit.cc
std::unique_ptr<FilterPlugin> NewProfilePresentFilter();   // profile_present.cc
std::unique_ptr<FilterPlugin> NewNodeSelectorFilter();     // node_selector.cc
std::unique_ptr<FilterPlugin> NewTaintTolerationFilter();  // taint_toleration.cc
std::unique_ptr<ScorePlugin> NewWarmPoolScore();           // warm_pool.cc
std::unique_ptr<ScorePlugin> NewLeastAllocatedScore();     // least_allocated.cc
std::unique_ptr<ScorePlugin> NewTenantSpreadScore();       // tenant_spread.cc

// Whether `request` fits in what `node` has left under `overcommit`; the reason if not. Shared
// by the resources filter and the reservation that re-checks it against live numbers.
FilterResult FitsResources(const Resources& request, const NodeInfo& node,
                           const Overcommit& overcommit);

// "amd64" -> "x86_64", "arm64" -> "aarch64"; others unchanged.
std::string NormalizeArch(absl::string_view arch);

}  // namespace moat::controller::scheduler
