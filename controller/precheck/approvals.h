// High-risk code waits here for a person (the OpenSandbox article, section 4.1): a command the
// pre-check judged high is held in PendingApproval until an administrator approves or rejects
// it (the admin API, `moat approval ...`) or precheck.approval_timeout passes, which rejects it.
//
// Every decision and every tagged scan is written to the store's audit trail:
//   audit/<unix micros, 16 digits>-<id>  {"id", "tenant", "sandbox", "command" (at most 4 KiB),
//                                          "risk", "tags", "state", "by", "reason", "at_ms"}
// so the trail survives restarts and is listed in time order by a prefix scan. A held request
// is not durable: a controller restart drops it (its client sees the connection close) and the
// trail says it was pending.
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
};

// Counters the metrics read.
struct ApprovalCounts {
  int pending = 0;
  int64_t approved = 0, rejected = 0, timed_out = 0;
};

class ApprovalQueue {
 public:
  // `store` and `clock` must outlive the queue. Timeouts use absl's real clock (a waiter's
  // CondVar), `clock` only the records' dates.
  ApprovalQueue(Store* store, const Clock* clock, absl::Duration timeout, int max_pending)
      : store_(store), clock_(clock), timeout_(timeout), max_pending_(max_pending) {}

  // Records a tagged scan that runs (low or medium) in the audit trail.
  absl::Status Audit(const std::string& tenant, const std::string& sandbox,
                     absl::string_view command, const Verdict& verdict, absl::string_view state);

  // Holds a high-risk command: records it PendingApproval and returns it. ResourceExhausted if
  // the tenant already has max_pending waiting.
  absl::StatusOr<Approval> Submit(const std::string& tenant, const std::string& sandbox,
                                  absl::string_view command, const Verdict& verdict);
  // Blocks until `id` is decided or the timeout passes. OK if approved; PermissionDenied with the
  // reason if rejected or timed out (then recorded TimedOut).
  absl::Status Wait(const std::string& id);
  // An administrator's decision. NotFound for an unknown id, FailedPrecondition if decided.
  absl::StatusOr<Approval> Decide(const std::string& id, bool approve, const std::string& by,
                                  const std::string& reason);

  std::vector<Approval> Pending() const;
  ApprovalCounts Counts() const;
  // The audit trail, oldest first, at most `limit` records from the newest end.
  absl::StatusOr<std::vector<std::string>> AuditTrail(size_t limit) const;

 private:
  absl::Status Record(const Approval& a);

  Store* store_;
  const Clock* clock_;
  const absl::Duration timeout_;
  const int max_pending_;
  mutable absl::Mutex mu_;
  absl::CondVar decided_;
  std::map<std::string, Approval> approvals_ ABSL_GUARDED_BY(mu_);  // Pending and just decided.
  ApprovalCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::controller::precheck
