// High-risk code waits here for a person (the OpenSandbox article, section 4.1): a command the
// pre-check judged high is held in PendingApproval until an administrator approves or rejects
// it (the admin API, `moat approval ...`) or precheck.approval_timeout passes, which rejects it.
//
// Holds are stored, so a restart or a failover keeps them (every engine: SQLite, etcd, memory):
//   approvals/<id>  {"id", "tenant", "sandbox", "command", "digest", "risk", "tags", "state",
//                    "by", "reason", "created_ms", "decided_ms", "deadline_ms"}
// written with the hold, with the decision, and deleted once a waiter took the decision (or
// the timeout rejected it). The caller whose request was held on a controller that died sees
// its connection close; the hold lives on in the store: the next leader lists it (Load), the
// administrator's decision works there, and the same command sent again to the same sandbox by
// the same tenant (matched by the SHA-256 of the whole command) waits on that hold, or takes
// its decision at once if it was made meanwhile. An undecided hold is still rejected at its
// deadline (Tick: holds nobody waits on here); an unclaimed decision is dropped one timeout
// after it.
//
// Every decision and every tagged scan is written to the store's audit trail:
//   audit/<unix micros, 16 digits>-<id>-<state>  {"id", "tenant", "sandbox", "command" (at most
//                                          4 KiB), "risk", "tags", "state", "by", "reason",
//                                          "at_ms"}
// so the trail survives restarts and is listed in time order by a prefix scan. It is bounded
// (AuditRetention: records older than max_age or beyond the newest max_records are deleted by
// Tick, at most once a minute).
//
// Thread-safe. Waiters block on a CondVar, not a poll.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/precheck/precheck.h"
#include "controller/store/store.h"
#include "util/clock.h"

namespace moat::controller::precheck {

inline constexpr char kPendingApproval[] = "PendingApproval";

struct Approval {
  std::string id;
  std::string tenant, sandbox, command;
  Risk risk = Risk::kHigh;
  std::vector<std::string> tags;
  std::string state = kPendingApproval;  // PendingApproval, Approved, Rejected, TimedOut.
  std::string by, reason;                // Who decided and why.
  absl::Time created_at, decided_at;
  std::string digest;   // SHA-256 (hex) of the whole command: a retry of it finds this hold.
  absl::Time deadline;  // Real time (absl::Now()) at which an undecided hold is rejected.
  int waiters = 0;      // Requests blocked on it here (in memory only).
};

// How much of the audit trail is kept (precheck.audit_max_age, precheck.audit_max_records).
struct AuditRetention {
  absl::Duration max_age = absl::Hours(24 * 30);
  size_t max_records = 10000;
};

// Counters the metrics read.
struct ApprovalCounts {
  int pending = 0;
  int64_t approved = 0, rejected = 0, timed_out = 0;
};

class ApprovalQueue {
 public:
  // `store` and `clock` must outlive the queue. Timeouts use absl's real clock (a waiter's
  // CondVar), `clock` only the records' dates (and the audit trail's age).
  ApprovalQueue(Store* store, const Clock* clock, absl::Duration timeout, int max_pending,
                AuditRetention retention = {})
      : store_(store),
        clock_(clock),
        timeout_(timeout),
        max_pending_(max_pending),
        retention_(retention) {}

  // Replaces the holds this queue knows by the stored ones (at start, and when this replica
  // becomes the leader: the previous leader's holds). Holds a request waits on here are kept
  // and get the stored decision. Fails, changing nothing, if the store cannot be read.
  absl::Status Load();

  // Records a tagged scan that runs (low or medium) in the audit trail.
  absl::Status Audit(const std::string& tenant, const std::string& sandbox,
                     absl::string_view command, const Verdict& verdict, absl::string_view state);

  // Holds a high-risk command: records it PendingApproval and returns it. The same command for
  // the same sandbox and tenant as a stored hold returns that hold instead (a retry after a
  // failover): pending, or decided meanwhile (Wait then answers at once). ResourceExhausted if
  // the tenant already has max_pending waiting; the store's error if the hold cannot be stored
  // (fail closed: the command does not run).
  absl::StatusOr<Approval> Submit(const std::string& tenant, const std::string& sandbox,
                                  absl::string_view command, const Verdict& verdict);
  // Blocks until `id` is decided or its deadline passes. OK if approved; PermissionDenied with
  // the reason if rejected or timed out (then recorded TimedOut). The decision is used up.
  absl::Status Wait(const std::string& id);
  // An administrator's decision, stored before anyone is told. NotFound for an unknown id,
  // FailedPrecondition if decided, the store's error if it cannot be stored (nothing changes).
  absl::StatusOr<Approval> Decide(const std::string& id, bool approve, const std::string& by,
                                  const std::string& reason);
  // Once a second on the leader: rejects the holds past their deadline that nobody waits on
  // here, drops unclaimed decisions, and prunes the audit trail (at most once a minute).
  void Tick();
  // Deletes the audit records older than retention.max_age or beyond the newest
  // retention.max_records; how many.
  absl::StatusOr<size_t> PruneAudit();

  std::vector<Approval> Pending() const;
  ApprovalCounts Counts() const;
  // The audit trail, oldest first, at most `limit` records from the newest end.
  absl::StatusOr<std::vector<std::string>> AuditTrail(size_t limit) const;

 private:
  // The audit record of `a` added to `batch`; `hold`: and the hold's own record (approvals/).
  static void AddAudit(const Approval& a, WriteBatch& batch);
  static void AddHold(const Approval& a, WriteBatch& batch);
  absl::Status Commit(const WriteBatch& batch);
  // Marks `a` TimedOut (pending, past its deadline).
  void TimeOut(Approval& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* store_;
  const Clock* clock_;
  const absl::Duration timeout_;
  const int max_pending_;
  const AuditRetention retention_;
  mutable absl::Mutex mu_;
  absl::CondVar decided_;
  std::map<std::string, Approval> approvals_ ABSL_GUARDED_BY(mu_);  // Pending and unclaimed.
  ApprovalCounts counts_ ABSL_GUARDED_BY(mu_);  // approved, rejected, timed_out: by this one.
  absl::Time last_prune_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace moat::controller::precheck
