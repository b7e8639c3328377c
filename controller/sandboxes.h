// The lifecycle of the controller's sandboxes: place (schedule, reserve, call the agent, retry
// elsewhere), track, expire, delete, and give up on those of lost nodes. The HTTP layer only
// translates OpenSandbox's JSON to these calls.
//
//   create ──▶ Pending ──(a node took it)──▶ Running ──(delete, expiry)──▶ gone (404)
//                 │                            │
//                 └──(no node, retries spent)  └──(its node lost)──▶ Failed (NODE_LOST)
//                          ▼
//                        Failed
//
// Durable writes (issue 12: at most two per lifecycle on the hot path): one when a sandbox is
// Running (the create is acknowledged only after it), one when it is deleted. Pending sandboxes
// live in memory: a create the controller never acknowledged may vanish with a crash, and
// whatever an agent runs for it is deleted by the reconciler (Reconcile).
//
// Locking: mu_ guards the in-memory table; agent calls and store commits run without it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "controller/agent_client.h"
#include "controller/metrics.h"
#include "controller/nodes.h"
#include "controller/scheduler/scheduler.h"
#include "controller/store/store.h"

namespace moat::controller {

struct Sandbox {
  std::string id;
  std::string tenant;
  std::string image;
  std::string profile;
  std::string arch;  // Requested platform.arch, normalised; empty: any.
  std::vector<std::string> entrypoint;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> metadata;
  scheduler::Resources resources;
  std::string state = "Pending";  // OpenSandbox's: Pending, Running, Failed, Terminated.
  std::string reason;             // Machine-readable: NODE_LOST, UNSCHEDULABLE, ...
  std::string message;            // For people: "0/3 nodes: 2 insufficient memory, 1 no arm64".
  absl::Time created_at, last_transition;
  absl::Time expires_at = absl::InfiniteFuture();  // InfiniteFuture: no expiry.
  std::string node, agent_id, agent_token;
};

// The store's encoding of a sandbox (JSON; the agent token included: the proxy needs it).
std::string EncodeSandbox(const Sandbox& s);
absl::StatusOr<Sandbox> DecodeSandbox(absl::string_view text);

struct SandboxManagerOptions {
  int retries = 3;                                          // Other nodes after an agent fails.
  absl::Duration create_timeout = absl::Seconds(60);        // Create waits this long for a node.
  absl::Duration retry_interval = absl::Milliseconds(200);  // While no node fits.
  absl::Duration agent_ttl_slack = absl::Minutes(1);     // Agents expire sandboxes this much later.
  absl::Duration no_expiry_agent_ttl = absl::Hours(24);  // Agent TTL for "no timeout" sandboxes.
};

class SandboxManager {
 public:
  // Every pointer must outlive the manager.
  SandboxManager(Store* store, NodeTable* nodes, AgentClient* agents,
                 const scheduler::Scheduler* scheduler, ControllerMetrics* metrics,
                 const Clock* clock, SandboxManagerOptions options);

  // Loads what the store holds (at start, before serving).
  absl::Status Load();
  // Replaces the stored sandboxes by what the store holds now (a follower's refresh, a new
  // leader's first step), keeping Pending ones no store has yet. Fails, changing nothing, if
  // the store cannot be read.
  absl::Status Reload();

  // Places `spec` (its id, tenant, profile, resources, ... filled by the caller) and returns it
  // Running. If no node fits within create_timeout, it is returned Pending with the reason
  // ("0/3 nodes: ..."), stored, and placed later by RetryPending. Unavailable when the agents
  // failed on 1 + retries nodes (nothing is kept).
  absl::StatusOr<Sandbox> Create(Sandbox spec);
  // Tries once to place every Pending sandbox no create is waiting for (the placer thread).
  void RetryPending();
  // A thread that calls RetryPending every `interval` until StopPlacer (or destruction).
  void StartPlacer(absl::Duration interval = absl::Seconds(1));
  void StopPlacer();
  ~SandboxManager();
  // NotFound for other tenants' sandboxes too.
  absl::StatusOr<Sandbox> Get(const std::string& tenant, const std::string& id) const;
  std::vector<Sandbox> List(const std::string& tenant) const;  // Newest first.
  // The sandbox whose per-sandbox token is `token` (the proxy's other credential); NotFound
  // for a wrong token as for an unknown id.
  absl::StatusOr<Sandbox> GetForToken(const std::string& id, absl::string_view token) const;
  absl::Status Delete(const std::string& tenant, const std::string& id);
  // FailedPrecondition for a sandbox without expiry (OpenSandbox answers 409), InvalidArgument
  // for a time not in the future.
  absl::StatusOr<absl::Time> Renew(const std::string& tenant, const std::string& id,
                                   absl::Time expires_at);
  // JSON merge patch of the metadata: a value replaces, nullopt removes.
  absl::StatusOr<Sandbox> PatchMetadata(
      const std::string& tenant, const std::string& id,
      const std::map<std::string, std::optional<std::string>>& patch);

  // A node was lost: its sandboxes are Failed with reason NODE_LOST (durably).
  void NodeLost(const std::string& node);
  // A node (re)joined: what its agent runs is compared with what the controller knows. Agent
  // sandboxes the controller does not know are deleted (orphans of a crash); Running sandboxes
  // the agent no longer has become Failed (SANDBOX_MISSING).
  absl::Status Reconcile(const std::string& node);
  // Once a second: deletes expired sandboxes, refreshes the gauges.
  void Tick();

  int Pending() const;

 private:
  // Schedules, reserves and calls agents until one took the sandbox, `deadline` passes while no
  // node fits (ResourceExhausted) or 1 + retries agents failed (Unavailable).
  absl::Status Place(Sandbox& s, absl::Time deadline);
  // After a placement: Running and stored, or back to Pending with the reason.
  absl::StatusOr<Sandbox> Settle(Sandbox s, absl::Status placed, absl::Time start);
  void SetPendingReason(const std::string& id, const std::string& message);
  absl::Status Persist(const Sandbox& s);
  absl::Status Forget(const std::string& id);
  absl::Duration AgentTtl(absl::Time expires_at) const;

  Store* store_;
  NodeTable* nodes_;
  AgentClient* agents_;
  const scheduler::Scheduler* scheduler_;
  ControllerMetrics* metrics_;
  const Clock* clock_;
  const SandboxManagerOptions options_;

  mutable absl::Mutex mu_;
  std::map<std::string, Sandbox> sandboxes_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> placing_ ABSL_GUARDED_BY(mu_);  // Ids a Place() is working on.
  std::thread placer_;
  absl::Notification stop_placer_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_){std::random_device{}()};
};

}  // namespace moat::controller
