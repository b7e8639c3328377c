// The store on etcd (`store: {engine: etcd, endpoints: [...]}`), for several controller
// replicas: every replica reads and writes the same cluster, so there is no second source of
// truth. Keys live under a prefix ("moat/" by default); a store revision is etcd's.
//
//   Commit ──▶ queue ──▶ committer thread ──▶ one txn of up to 128 operations ──▶ etcd
//                          (batches of concurrent commits that share no key)
//
// Group commit: concurrent Commits are sent together in one transaction of at most 128
// operations (etcd's --max-txn-ops default), so a create storm costs one round trip per group
// instead of one per sandbox; a few committer threads keep several transactions in flight.
// One caller's Commits stay in order (each returns before the next is queued). A transaction's
// compares are the union of its batches' preconditions; if it fails, each batch is retried alone so
// one conflict fails only its own.
//
// Fencing: with a fence (the leader's election key and its create revision), every transaction
// also compares that the key still exists with that revision, and fails with Unavailable
// (nothing written) when it does not: a deposed leader, whose lease etcd let expire, cannot
// write even if it has not yet noticed. Without a fence source, writes are unfenced (tools and
// tests that are not controllers).
//
// Reads are linearizable (etcd's default): Get and List fail with Unavailable when etcd has no
// quorum instead of answering from one member's possibly stale copy.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "controller/store/etcd_client.h"
#include "controller/store/store.h"

namespace moat::controller {

struct Fence {
  std::string key;
  int64_t revision = 0;
};

struct EtcdStoreOptions {
  std::string prefix = "moat/";  // Every key is stored as prefix + key.
  int max_txn_ops = 128;         // etcd's --max-txn-ops; a larger batch is refused.
  // Transactions in flight at once: each waits for etcd's fsync (tens of ms on some disks), so
  // a few in parallel keep the pipe full; etcd orders them.
  int committers = 4;
  // The fence every write carries; nullopt from it means "not the leader": the write fails.
  // Unset: writes are not fenced.
  std::function<std::optional<Fence>()> fence;
};

class EtcdStore final : public Store {
 public:
  // `client` must outlive the store. Checks that etcd answers.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(const EtcdClient* client,
                                                         EtcdStoreOptions options = {});
  ~EtcdStore() override;

  absl::StatusOr<std::optional<KeyValue>> Get(absl::string_view key) const override;
  absl::StatusOr<std::vector<KeyValue>> List(absl::string_view prefix) const override;
  absl::StatusOr<int64_t> Commit(const WriteBatch& batch) override;
  absl::StatusOr<int64_t> Revision() const override;

  // Transactions sent so far (a test sees creates grouped).
  int64_t transactions() const;

 private:
  struct Pending {
    const WriteBatch* batch;
    std::optional<absl::StatusOr<int64_t>> result;
  };
  EtcdStore(const EtcdClient* client, EtcdStoreOptions options);
  void CommitLoop();
  // One transaction for `group` (their batches share no key); fills each result.
  void Send(const std::vector<Pending*>& group, const std::optional<Fence>& fence);
  absl::StatusOr<int64_t> Txn(const std::vector<const WriteBatch*>& batches,
                              const std::optional<Fence>& fence, bool* preconditions_held);

  const EtcdClient* client_;
  const EtcdStoreOptions options_;
  mutable absl::Mutex mu_;
  std::deque<Pending*> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t transactions_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> committers_;
};

}  // namespace moat::controller
