// Leader election among controller replicas, through etcd: each replica holds an etcd lease
// and campaigns with it (etcd's election API: the candidate whose key under the election's
// name is oldest leads). etcd decides; nothing here is consensus of its own.
//
//   Follower ──(campaign won, lease alive)──▶ Leader
//      ▲                                        │
//      └──(lease expired, not renewed within renew_deadline, or Stop)
//
// Timing like Kubernetes' leader election (15 s lease, 10 s renew deadline, 2 s retry): the
// lease is renewed every renew_interval; a leader that has not renewed it for renew_deadline
// steps down on its own, before etcd can have given the lease (and the leadership) to another
// replica at lease_ttl. Writes are fenced anyway (EtcdStore's Fence): a leader that has not yet
// noticed it was deposed cannot write.
//
// Threads: one renews the lease and applies state changes (on_change runs there), one
// campaigns (etcd's campaign call blocks until elected).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/store/etcd_client.h"
#include "controller/store/etcd_store.h"

namespace moat::controller {

struct LeaderElectorOptions {
  std::string election = "moat/controller/leader";  // The etcd key prefix of the election.
  std::string identity;  // This replica's value: the URL followers forward writes to.
  absl::Duration lease_ttl = absl::Seconds(15);
  absl::Duration renew_interval = absl::Seconds(2);
  absl::Duration renew_deadline = absl::Seconds(10);
};

class LeaderElector {
 public:
  // `client` must outlive the elector; Stop cancels every campaign on it, so it is this
  // elector's alone.
  LeaderElector(const EtcdClient* client, LeaderElectorOptions options);
  ~LeaderElector();  // Stop().

  // Called with true when this replica becomes the leader and false when it stops being it,
  // from the elector's thread, never twice in a row with the same value. Set before Start.
  void SetOnChange(std::function<void(bool leader)> on_change) {
    on_change_ = std::move(on_change);
  }
  void Start();
  // Resigns if leading (another replica leads at once, not after the lease TTL), revokes the
  // lease and stops the threads.
  void Stop();

  bool IsLeader() const;
  // The fence for the store's writes while leading; nullopt otherwise.
  std::optional<Fence> CurrentFence() const;
  // The identity of the replica etcd says leads now (nullopt: none); Unavailable without etcd.
  absl::StatusOr<std::optional<std::string>> Leader() const;
  // The leader's identity as last read from etcd (at Start, then once per renew_interval, off
  // the request path, so forwarding does not wait for etcd); the last answer is kept while etcd
  // does not answer. Only while no leader is known (none was elected yet when this replica
  // last looked, or etcd names this replica while it does not lead) does it ask etcd itself,
  // at most once per kLookupInterval. Forwarding to a replica that no longer leads is safe: it
  // refuses (503).
  //
  // `refused`: a leader the caller found not leading (it refused a forwarded request, or nothing
  // listened at its address): an answer naming it is not trusted and etcd is asked, with the
  // same limit, so a follower whose copy is a renewal old learns at once who won an election.
  std::optional<std::string> KnownLeader(const std::optional<std::string>& refused = std::nullopt)
      const ABSL_LOCKS_EXCLUDED(mu_, lookup_mu_);
  static constexpr absl::Duration kLookupInterval = absl::Milliseconds(100);
  // Times this replica became the leader.
  int64_t terms() const;
  // The lease this replica campaigns with (0: none); tests revoke it to depose the leader.
  int64_t lease() const;

 private:
  void RenewLoop();
  void CampaignLoop(int64_t lease);
  void SetLeader(std::optional<LeaderKey> key) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether known_leader_ names a leader to forward to (not this replica unless it leads).
  bool Knows() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Knows(), and known_leader_ is not `refused`.
  bool Trusts(const std::optional<std::string>& refused) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Learn(std::optional<std::string> leader) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EtcdClient* client_;
  const LeaderElectorOptions options_;
  std::function<void(bool)> on_change_;
  std::thread renewer_;

  mutable absl::Mutex lookup_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // One etcd lookup at a time.
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;                 // 0: none yet (or it expired).
  std::optional<LeaderKey> won_ ABSL_GUARDED_BY(mu_);      // A campaign's result, not yet applied.
  std::optional<LeaderKey> leading_ ABSL_GUARDED_BY(mu_);  // Set while the leader.
  int64_t terms_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::optional<std::string> known_leader_ ABSL_GUARDED_BY(mu_);
  mutable absl::Time last_lookup_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<std::thread> campaigns_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::controller
