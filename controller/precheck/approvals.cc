#include "controller/precheck/approvals.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "util/log.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::controller::precheck {
namespace {

using nlohmann::json;
constexpr char kAuditPrefix[] = "audit/";
constexpr size_t kMaxAuditedCommand = 4096;

}  // namespace

absl::Status ApprovalQueue::Record(const Approval& a) {
  absl::Time at = a.state == kPendingApproval ? a.created_at : a.decided_at;
  json j = {{"id", a.id},
            {"tenant", a.tenant},
            {"sandbox", a.sandbox},
            {"command", a.command.substr(0, kMaxAuditedCommand)},
            {"risk", RiskName(a.risk)},
            {"tags", a.tags},
            {"state", a.state},
            {"by", a.by},
            {"reason", a.reason},
            {"at_ms", absl::ToUnixMillis(at)}};
  // Unique even for two records of one id in one microsecond: the state is part of the key.
  std::string key =
      absl::StrFormat("%s%016d-%s-%s", kAuditPrefix, absl::ToUnixMicros(at), a.id, a.state);
  return store_
      ->Commit(WriteBatch().Put(key, j.dump(-1, ' ', false, json::error_handler_t::replace)))
      .status();
}

absl::Status ApprovalQueue::Audit(const std::string& tenant, const std::string& sandbox,
                                  absl::string_view command, const Verdict& verdict,
                                  absl::string_view state) {
  ASSIGN_OR_RETURN(std::string token, NewToken());
  Approval a{.id = "run-" + token.substr(0, 12),
             .tenant = tenant,
             .sandbox = sandbox,
             .command = std::string(command),
             .risk = verdict.risk,
             .tags = verdict.Tags(),
             .state = std::string(state),
             .created_at = clock_->Now(),
             .decided_at = clock_->Now()};
  return Record(a);
}

absl::StatusOr<Approval> ApprovalQueue::Submit(const std::string& tenant,
                                               const std::string& sandbox,
                                               absl::string_view command, const Verdict& verdict) {
  ASSIGN_OR_RETURN(std::string token, NewToken());
  Approval a{.id = "apr-" + token.substr(0, 16),
             .tenant = tenant,
             .sandbox = sandbox,
             .command = std::string(command.substr(0, kMaxAuditedCommand)),
             .risk = verdict.risk,
             .tags = verdict.Tags(),
             .created_at = clock_->Now()};
  {
    absl::MutexLock lock(&mu_);
    int mine = 0;
    for (const auto& [id, p] : approvals_)
      mine += p.tenant == tenant && p.state == kPendingApproval;
    if (mine >= max_pending_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant \"", tenant, "\" already has ", mine,
          " command(s) waiting for approval (precheck.max_pending); wait for a decision"));
    }
    approvals_[a.id] = a;
    ++counts_.pending;
  }
  // Fail closed: a command whose hold cannot be recorded does not wait, it is refused.
  if (absl::Status st = Record(a); !st.ok()) {
    absl::MutexLock lock(&mu_);
    approvals_.erase(a.id);
    --counts_.pending;
    return st;
  }
  LogWarning(absl::StrCat("event PrecheckPendingApproval id=", a.id, " tenant=", tenant,
                          " sandbox=", sandbox, " tags=", absl::StrJoin(a.tags, ",")));
  return a;
}

absl::Status ApprovalQueue::Wait(const std::string& id) {
  const absl::Time deadline = absl::Now() + timeout_;
  Approval a;
  {
    absl::MutexLock lock(&mu_);
    auto it = approvals_.find(id);
    if (it == approvals_.end()) return absl::NotFoundError(absl::StrCat("no approval ", id));
    while (it->second.state == kPendingApproval) {
      if (decided_.WaitWithDeadline(&mu_, deadline)) break;  // True: the deadline passed.
    }
    if (it->second.state == kPendingApproval) {
      it->second.state = "TimedOut";
      it->second.by = "timeout";
      it->second.reason =
          absl::StrCat("no administrator decided within ", absl::FormatDuration(timeout_),
                       " (precheck.approval_timeout)");
      it->second.decided_at = clock_->Now();
      --counts_.pending;
      ++counts_.timed_out;
    }
    a = it->second;
    approvals_.erase(it);
  }
  if (a.state == "TimedOut") {
    if (absl::Status st = Record(a); !st.ok()) LogError(st.message());
  }
  if (a.state == "Approved") return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("the pre-check held this command (risk ", RiskName(a.risk), ": ",
                   absl::StrJoin(a.tags, ", "), ") for approval ", a.id, " and it was ",
                   a.state == "TimedOut" ? "not approved in time: " : "rejected: ", a.reason));
}

absl::StatusOr<Approval> ApprovalQueue::Decide(const std::string& id, bool approve,
                                               const std::string& by, const std::string& reason) {
  Approval a;
  {
    absl::MutexLock lock(&mu_);
    auto it = approvals_.find(id);
    if (it == approvals_.end()) {
      return absl::NotFoundError(
          absl::StrCat("no pending approval \"", id, "\" (decided, timed out, or never held)"));
    }
    if (it->second.state != kPendingApproval) {
      return absl::FailedPreconditionError(
          absl::StrCat("approval ", id, " is already ", it->second.state));
    }
    it->second.state = approve ? "Approved" : "Rejected";
    it->second.by = by;
    it->second.reason =
        reason.empty() ? (approve ? "approved" : "rejected by an administrator") : reason;
    it->second.decided_at = clock_->Now();
    --counts_.pending;
    ++(approve ? counts_.approved : counts_.rejected);
    a = it->second;
  }
  decided_.SignalAll();
  if (absl::Status st = Record(a); !st.ok()) LogError(st.message());
  LogInfo(absl::StrCat("event Precheck", a.state, " id=", id, " by=", by));
  return a;
}

std::vector<Approval> ApprovalQueue::Pending() const {
  absl::MutexLock lock(&mu_);
  std::vector<Approval> out;
  for (const auto& [id, a] : approvals_) {
    if (a.state == kPendingApproval) out.push_back(a);
  }
  return out;
}

ApprovalCounts ApprovalQueue::Counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

absl::StatusOr<std::vector<std::string>> ApprovalQueue::AuditTrail(size_t limit) const {
  ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, store_->List(kAuditPrefix));
  std::vector<std::string> out;
  size_t from = kvs.size() > limit ? kvs.size() - limit : 0;
  for (size_t i = from; i < kvs.size(); ++i) out.push_back(kvs[i].value);
  return out;
}

}  // namespace moat::controller::precheck
