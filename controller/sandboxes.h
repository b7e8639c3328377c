// The lifecycle of the controller's sandboxes: place (schedule, reserve, call the agent, retry
// elsewhere), track, expire, delete, and give up on those of lost nodes. The HTTP layer only
// translates OpenSandbox's JSON to these calls.
//
//   create ──▶ Pending ──(a node took it)──▶ Running ──(delete, expiry)──▶ gone (404)
//                 │                            │  ▲
//                 └──(no node, retries spent)  │  └── Resuming ◀── Paused ◀── Pausing ◀─┐
//                          ▼                   │        (resume)    (agent froze it) (pause)
//                        Failed                ├──(its node lost)──▶ Failed (NODE_LOST)
//                                              ├──(its node drained)──▶ Failed (NODE_DRAINED)
//                                              ├──(entrypoint exited 0)──▶ Terminated
//                                              └──(entrypoint failed)──▶ Failed
//
// The entrypoint is the sandbox's main process, as a container's command is on OpenSandbox's
// Docker server: it is started (a background command through the agent, with the sandbox's
// env) before the create answers, and a program the sandbox cannot run fails the create (400,
// nothing left on the agent), as `docker run` fails. When it ends, the sandbox ends with it:
// deleted on the agent, Terminated (reason CONTAINER_EXITED) after exit 0, else Failed
// (CONTAINER_EXITED_ERROR, the code in the message), which its owner sees on GET until it is
// deleted or expires. The controller looks at each entrypoint every entrypoint_check_interval.
//
// Durable writes (issue 12: at most two per lifecycle on the hot path): one when a sandbox is
// Running (the create is acknowledged only after it), one when it is deleted. A create that no
// node takes within create_timeout is answered Pending, and stored first (a third write, off the
// hot path): it survives a restart or a failover and the placer of whichever controller leads
// places it. Until its create answers, a sandbox lives in memory only: a create the controller
// never acknowledged may vanish with a crash, and whatever an agent runs for it is deleted by
// the reconciler (Reconcile). Each agent create carries its attempt (kAttemptKey): a Pending
// sandbox's copy from an attempt that is not in flight here is an orphan, so a sandbox whose
// placement a dead leader had started runs once.
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
#include "controller/tenants/quota.h"

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
  scheduler::Resources resources;  // Reserved by the scheduler (resourceRequests, else limits).
  // resourceLimits, enforced by the agent when tighter than the profile's (0: not given).
  double limit_cpus = 0;
  uint64_t limit_memory = 0;
  // networkPolicy's egress rules as moat's policy (allowedDomains, deniedDomains); both empty:
  // the profile's policy (no network by default).
  std::vector<std::string> egress_allow, egress_deny;
  // OpenSandbox's: Pending, Running, Pausing, Paused, Resuming, Failed.
  std::string state = "Pending";
  std::string reason;   // Machine-readable: NODE_LOST, UNSCHEDULABLE, ...
  std::string message;  // For people: "0/3 nodes: 2 insufficient memory, 1 no arm64".
  absl::Time created_at, last_transition;
  absl::Time expires_at = absl::InfiniteFuture();  // InfiniteFuture: no expiry.
  std::string node, agent_id, agent_token;
  // The agent's id of the entrypoint's command (started when the sandbox became Running).
  std::string entrypoint_command;
  // A sandbox of POST /v1/run: never stored (no durable write at all), never left Pending. A
  // controller that crashes mid-run forgets it; the reconciler then deletes it as an orphan.
  bool ephemeral = false;
};

// On a node: Running, or paused or being paused or resumed. The agent holds such a sandbox.
bool OnNode(const Sandbox& s);

// What a drain did or will do.
struct DrainReport {
  std::vector<std::string> ended;  // Ids ended now (NODE_DRAINED).
  int remaining = 0;               // Sandboxes left on the node, ended at `deadline`.
  absl::Time deadline;
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
  absl::Duration entrypoint_check_interval = absl::Seconds(2);  // Tick asks agents this often.
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
  // failed on 1 + retries nodes (nothing is kept). PermissionDenied, naming the quota, if the
  // tenant's Pending and Running sandboxes plus this one would exceed `quota`.
  absl::StatusOr<Sandbox> Create(Sandbox spec, const TenantQuota& quota = {});
  // POST /v1/run: `spec` placed (from the warm pool when it keeps to its profile), `command`
  // run in it, and the sandbox deleted whatever happened. ResourceExhausted when no node fits
  // within create_timeout (nothing is left waiting).
  absl::StatusOr<AgentCommandResult> Run(Sandbox spec, const AgentCommand& command);
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
  // A Pending sandbox no placement is working on is forgotten (FailedPrecondition while one is:
  // retry).
  absl::Status Delete(const std::string& tenant, const std::string& id);
  // FailedPrecondition for a sandbox without expiry (OpenSandbox answers 409), InvalidArgument
  // for a time not in the future.
  absl::StatusOr<absl::Time> Renew(const std::string& tenant, const std::string& id,
                                   absl::Time expires_at);
  // JSON merge patch of the metadata: a value replaces, nullopt removes.
  absl::StatusOr<Sandbox> PatchMetadata(
      const std::string& tenant, const std::string& id,
      const std::map<std::string, std::optional<std::string>>& patch);

  // Pause (cgroup freezer on the agent): Running -> Pausing -> Paused; Resume: Paused ->
  // Resuming -> Running. Both answer once the agent did it, the new state stored.
  // FailedPrecondition (409) from any other state; the agent's error leaves the state as it was.
  absl::StatusOr<Sandbox> Pause(const std::string& tenant, const std::string& id);
  absl::StatusOr<Sandbox> Resume(const std::string& tenant, const std::string& id);

  // Drains `node`: no new placements (NodeTable::SetDraining), and its sandboxes, which cannot
  // move (their processes and memory are on the node), end `grace` from now: deleted on the
  // agent and Failed with reason NODE_DRAINED, so their owners see why. grace 0: now. Pending
  // sandboxes are not on a node: they are placed on the others. Until the node is uncordoned,
  // Tick also ends what lands on it after the deadline (a create that reserved it before).
  absl::StatusOr<DrainReport> Drain(const std::string& node, absl::Duration grace);

  // A node was lost: its sandboxes are Failed with reason NODE_LOST (durably).
  void NodeLost(const std::string& node);
  // A node (re)joined: what its agent runs is compared with what the controller knows. Agent
  // sandboxes the controller does not know are deleted (orphans of a crash); Running sandboxes
  // the agent no longer has become Failed (SANDBOX_MISSING).
  absl::Status Reconcile(const std::string& node);
  // Once a second: deletes expired sandboxes, ends those whose entrypoint exited, refreshes the
  // gauges.
  void Tick();

  int Pending() const;
  // What each tenant holds now (Pending and Running sandboxes), for quotas and metrics.
  std::map<std::string, TenantUsage> UsageByTenant() const;

 private:
  // Schedules, reserves and calls agents until one took the sandbox, `deadline` passes while no
  // node fits (ResourceExhausted) or 1 + retries agents failed (Unavailable).
  // `warm`: the agent took it from its warm pool.
  absl::Status Place(Sandbox& s, absl::Time deadline, bool& warm);
  // After a placement: Running and stored, or back to Pending with the reason.
  absl::StatusOr<Sandbox> Settle(Sandbox s, absl::Status placed, absl::Time start, bool warm);
  void SetPendingReason(const std::string& id, const std::string& message);
  absl::Status Persist(const Sandbox& s);
  absl::Status Forget(const std::string& id);
  absl::Duration AgentTtl(absl::Time expires_at) const;
  absl::StatusOr<Sandbox> Freeze(const std::string& tenant, const std::string& id, bool pause);
  // The agent's create for `s` on `node` (limits tighter than the node's profile, the policy).
  AgentCreate AgentRequest(const Sandbox& s, const std::string& node,
                           const std::string& attempt) const;
  // Starts `s`'s entrypoint on its agent through execd (sets entrypoint_command): for agents
  // older than AgentCreate::entrypoint, which the others start in their create. InvalidArgument
  // if its program is not one the sandbox can run; nothing to do for a /v1/run sandbox.
  absl::Status StartEntrypoint(Sandbox& s);
  // Asks the agents about the entrypoints not looked at for entrypoint_check_interval, and ends
  // the sandboxes whose entrypoint has exited.
  void WatchEntrypoints();
  void EndWithEntrypoint(const Sandbox& s, const AgentCommandState& state);
  // Ends the sandboxes of a drained node (NODE_DRAINED); their ids.
  std::vector<std::string> EndDrained(const std::string& node);

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
  // Id -> the attempt of the agent create in flight for it (kAttemptKey).
  std::map<std::string, std::string> attempts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> drain_deadlines_ ABSL_GUARDED_BY(mu_);  // Node -> when.
  // Sandbox id -> when its entrypoint was last looked at.
  std::map<std::string, absl::Time> entrypoint_checked_ ABSL_GUARDED_BY(mu_);
  std::thread placer_;
  absl::Notification stop_placer_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_){std::random_device{}()};
};

}  // namespace moat::controller
