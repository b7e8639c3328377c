#include "controller/precheck/approvals.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "util/log.h"
#include "util/quote.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::controller::precheck {
namespace {

using nlohmann::json;
constexpr char kAuditPrefix[] = "audit/";
constexpr char kHoldPrefix[] = "approvals/";
constexpr size_t kMaxAuditedCommand = 4096;
constexpr size_t kMaxBatch = 128;  // etcd's --max-txn-ops.

std::string Digest(absl::string_view command) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(command.data(), command.size(), md, &n, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(md), n));
}

Risk RiskFromName(absl::string_view name) {
  if (name == "low") return Risk::kLow;
  if (name == "medium") return Risk::kMedium;
  return Risk::kHigh;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

absl::StatusOr<Approval> DecodeHold(absl::string_view text) {
  try {
    json j = json::parse(text);
    Approval a;
    a.id = j.at("id").get<std::string>();
    a.tenant = j.at("tenant").get<std::string>();
    a.sandbox = j.at("sandbox").get<std::string>();
    a.command = j.at("command").get<std::string>();
    a.digest = j.at("digest").get<std::string>();
    a.risk = RiskFromName(j.at("risk").get<std::string>());
    a.tags = j.at("tags").get<std::vector<std::string>>();
    a.state = j.at("state").get<std::string>();
    a.by = j.at("by").get<std::string>();
    a.reason = j.at("reason").get<std::string>();
    a.created_at = absl::FromUnixMillis(j.at("created_ms").get<int64_t>());
    a.decided_at = absl::FromUnixMillis(j.at("decided_ms").get<int64_t>());
    a.deadline = absl::FromUnixMillis(j.at("deadline_ms").get<int64_t>());
    return a;
  } catch (const json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("an approval record in the store is damaged: ", e.what()));
  }
}

}  // namespace

void ApprovalQueue::AddAudit(const Approval& a, WriteBatch& batch) {
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
  batch.Put(absl::StrFormat("%s%016d-%s-%s", kAuditPrefix, absl::ToUnixMicros(at), a.id, a.state),
            Dump(j));
}

void ApprovalQueue::AddHold(const Approval& a, WriteBatch& batch) {
  json j = {{"id", a.id},
            {"tenant", a.tenant},
            {"sandbox", a.sandbox},
            {"command", a.command},
            {"digest", a.digest},
            {"risk", RiskName(a.risk)},
            {"tags", a.tags},
            {"state", a.state},
            {"by", a.by},
            {"reason", a.reason},
            {"created_ms", absl::ToUnixMillis(a.created_at)},
            {"decided_ms", absl::ToUnixMillis(a.decided_at)},
            {"deadline_ms", absl::ToUnixMillis(a.deadline)}};
  batch.Put(absl::StrCat(kHoldPrefix, a.id), Dump(j));
}

absl::Status ApprovalQueue::Commit(const WriteBatch& batch) {
  if (batch.puts.empty() && batch.deletes.empty()) return absl::OkStatus();
  return store_->Commit(batch).status();
}

void ApprovalQueue::TimeOut(Approval& a) {
  a.state = "TimedOut";
  a.by = "timeout";
  a.reason = absl::StrCat("no administrator decided within ", absl::FormatDuration(timeout_),
                          " (precheck.approval_timeout)");
  a.decided_at = clock_->Now();
  ++counts_.timed_out;
}

absl::Status ApprovalQueue::Load() {
  ASSIGN_OR_RETURN(std::vector<KeyValue> records, store_->List(kHoldPrefix));
  std::map<std::string, Approval> stored;
  for (const KeyValue& kv : records) {
    ASSIGN_OR_RETURN(Approval a, DecodeHold(kv.value));
    stored[a.id] = std::move(a);
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, mine] : approvals_) {
      if (mine.waiters == 0) continue;
      auto it = stored.find(id);
      if (it == stored.end()) {
        stored[id] = mine;  // Not stored (yet): kept for its waiters.
      } else {
        it->second.waiters = mine.waiters;
        if (it->second.state == kPendingApproval) it->second.state = mine.state;
      }
    }
    approvals_ = std::move(stored);
  }
  decided_.SignalAll();
  return absl::OkStatus();
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
  WriteBatch batch;
  AddAudit(a, batch);
  return Commit(batch);
}

absl::StatusOr<Approval> ApprovalQueue::Submit(const std::string& tenant,
                                               const std::string& sandbox,
                                               absl::string_view command, const Verdict& verdict) {
  const std::string digest = Digest(command);
  ASSIGN_OR_RETURN(std::string token, NewToken());
  Approval a{.id = "apr-" + token.substr(0, 16),
             .tenant = tenant,
             .sandbox = sandbox,
             .command = std::string(command.substr(0, kMaxAuditedCommand)),
             .risk = verdict.risk,
             .tags = verdict.Tags(),
             .created_at = clock_->Now(),
             .digest = digest,
             .deadline = absl::Now() + timeout_};
  {
    absl::MutexLock lock(&mu_);
    int mine = 0;
    for (const auto& [id, p] : approvals_) {
      // The same command again (its caller's connection was lost with a controller): the hold
      // that already exists, pending or decided.
      if (p.tenant == tenant && p.sandbox == sandbox && p.digest == digest &&
          p.state != "TimedOut") {
        return p;
      }
      mine += p.tenant == tenant && p.state == kPendingApproval;
    }
    if (mine >= max_pending_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant ", QuoteForMessage(tenant), " already has ", mine,
          " command(s) waiting for approval (precheck.max_pending); wait for a decision"));
    }
    approvals_[a.id] = a;
  }
  // Fail closed: a command whose hold cannot be stored does not wait, it is refused.
  WriteBatch batch;
  AddHold(a, batch);
  AddAudit(a, batch);
  if (absl::Status st = Commit(batch); !st.ok()) {
    absl::MutexLock lock(&mu_);
    approvals_.erase(a.id);
    return st;
  }
  LogWarning(absl::StrCat("event PrecheckPendingApproval id=", a.id, " tenant=", tenant,
                          " sandbox=", sandbox, " tags=", absl::StrJoin(a.tags, ",")));
  return a;
}

absl::Status ApprovalQueue::Wait(const std::string& id) {
  Approval a;
  bool timed_out = false, claimed = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = approvals_.find(id);
    if (it == approvals_.end()) return absl::NotFoundError(absl::StrCat("no approval ", id));
    ++it->second.waiters;  // While it waits, nobody erases the entry (Tick, Load keep it).
    while (it->second.state == kPendingApproval) {
      if (decided_.WaitWithDeadline(&mu_, it->second.deadline)) break;  // The deadline passed.
    }
    if (it->second.state == kPendingApproval) {
      TimeOut(it->second);
      timed_out = true;
    }
    a = it->second;
    if (--it->second.waiters == 0) {
      approvals_.erase(it);  // The decision is used up.
      claimed = true;
    }
  }
  WriteBatch batch;
  if (timed_out) AddAudit(a, batch);
  if (claimed) batch.Delete(absl::StrCat(kHoldPrefix, id));
  if (absl::Status st = Commit(batch); !st.ok()) {
    // The hold stays stored: a retry of the command gets the same decision; Tick drops it.
    LogError(absl::StrCat("approval ", id, ": ", st.message()));
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
      return absl::NotFoundError(absl::StrCat("no pending approval ", QuoteForMessage(id),
                                              " (decided, timed out, or never held)"));
    }
    if (it->second.state != kPendingApproval) {
      return absl::FailedPreconditionError(
          absl::StrCat("approval ", id, " is already ", it->second.state));
    }
    if (absl::Now() >= it->second.deadline) {
      return absl::FailedPreconditionError(
          absl::StrCat("approval ", id, " timed out (precheck.approval_timeout)"));
    }
    a = it->second;
  }
  a.state = approve ? "Approved" : "Rejected";
  a.by = by;
  a.reason = reason.empty() ? (approve ? "approved" : "rejected by an administrator") : reason;
  a.decided_at = clock_->Now();
  // Stored before anyone acts on it: after a failover the decision is still the decision.
  WriteBatch batch;
  AddHold(a, batch);
  AddAudit(a, batch);
  RETURN_IF_ERROR(Commit(batch));
  {
    absl::ReleasableMutexLock lock(&mu_);
    auto it = approvals_.find(id);
    if (it == approvals_.end() || it->second.state != kPendingApproval) {
      // Timed out (or decided by another administrator) while the decision was being stored:
      // that outcome stands, and the record this decision wrote must not outlive it.
      const bool gone = it == approvals_.end();
      std::string now = gone ? "timed out" : it->second.state;
      lock.Release();
      if (gone) {
        (void)Commit(WriteBatch().Delete(absl::StrCat(kHoldPrefix, id)));
      }
      return absl::FailedPreconditionError(absl::StrCat("approval ", id, " is already ", now));
    }
    const int waiters = it->second.waiters;
    it->second = a;
    it->second.waiters = waiters;
    ++(approve ? counts_.approved : counts_.rejected);
  }
  decided_.SignalAll();
  LogInfo(absl::StrCat("event Precheck", a.state, " id=", id, " by=", by));
  return a;
}

void ApprovalQueue::Tick() {
  const absl::Time now = absl::Now();
  WriteBatch batch;
  bool prune = false;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = approvals_.begin(); it != approvals_.end();) {
      Approval& a = it->second;
      // A waiter here wakes at the deadline and answers its caller itself.
      if (a.waiters > 0) {
        ++it;
        continue;
      }
      if (a.state == kPendingApproval && now >= a.deadline) {
        TimeOut(a);
        AddAudit(a, batch);
        LogInfo(absl::StrCat("event PrecheckTimedOut id=", a.id));
      } else if (a.state == kPendingApproval || now < a.deadline + timeout_) {
        ++it;  // Undecided, or a decision its caller may still come back for.
        continue;
      }
      batch.Delete(absl::StrCat(kHoldPrefix, a.id));
      it = approvals_.erase(it);
      if (batch.puts.size() + batch.deletes.size() + 2 > kMaxBatch) break;  // The rest next time.
    }
    if (now - last_prune_ >= absl::Minutes(1)) {
      last_prune_ = now;
      prune = true;
    }
  }
  if (absl::Status st = Commit(batch); !st.ok()) {
    LogError(absl::StrCat("approvals: recording timeouts: ", st.message()));
  }
  if (prune) {
    absl::StatusOr<size_t> pruned = PruneAudit();
    if (!pruned.ok())
      LogWarning(absl::StrCat("pruning the audit trail: ", pruned.status().message()));
  }
}

absl::StatusOr<size_t> ApprovalQueue::PruneAudit() {
  ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, store_->List(kAuditPrefix));
  const int64_t cutoff_us = absl::ToUnixMicros(clock_->Now() - retention_.max_age);
  size_t end = 0;  // Records [0, end) go: oldest first, so a prefix of the listing.
  if (kvs.size() > retention_.max_records) end = kvs.size() - retention_.max_records;
  while (end < kvs.size()) {
    int64_t at_us = 0;
    absl::string_view key = kvs[end].key;
    key.remove_prefix(sizeof(kAuditPrefix) - 1);
    if (!absl::SimpleAtoi(key.substr(0, 16), &at_us) || at_us >= cutoff_us) break;
    ++end;
  }
  for (size_t from = 0; from < end; from += kMaxBatch) {
    WriteBatch batch;
    for (size_t i = from; i < std::min(end, from + kMaxBatch); ++i) batch.Delete(kvs[i].key);
    RETURN_IF_ERROR(Commit(batch));
  }
  if (end > 0) LogInfo(absl::StrCat("audit trail: ", end, " old record(s) deleted"));
  return end;
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
  ApprovalCounts out = counts_;
  out.pending = 0;
  for (const auto& [id, a] : approvals_) out.pending += a.state == kPendingApproval;
  return out;
}

absl::StatusOr<std::vector<std::string>> ApprovalQueue::AuditTrail(size_t limit) const {
  ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, store_->List(kAuditPrefix));
  std::vector<std::string> out;
  size_t from = kvs.size() > limit ? kvs.size() - limit : 0;
  for (size_t i = from; i < kvs.size(); ++i) out.push_back(kvs[i].value);
  return out;
}

}  // namespace moat::controller::precheck
