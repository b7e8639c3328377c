#include "node-agent/pool/registry.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/token.h"

namespace moat::agent {
namespace {

absl::Status NotFound(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("no sandbox \"", id, "\" on this node"));
}

bool Serving(SandboxState state) {
  return state == SandboxState::kReady || state == SandboxState::kRunning;
}

}  // namespace

absl::string_view StateName(SandboxState state) {
  switch (state) {
    case SandboxState::kCreating:
      return "creating";
    case SandboxState::kReady:
      return "ready";
    case SandboxState::kRunning:
      return "running";
    case SandboxState::kRecycling:
      return "recycling";
    case SandboxState::kFailed:
      return "failed";
  }
  return "unknown";
}

absl::StatusOr<std::string> NewSandboxId() {
  absl::StatusOr<std::string> token = NewToken();
  if (!token.ok()) return token.status();
  return absl::StrCat("sb-", token->substr(0, 20));
}

absl::Status Registry::Insert(SandboxRecord record) {
  absl::Time now = clock_->Now();
  record.created = now;
  record.last_transition = now;
  absl::MutexLock lock(&mu_);
  std::string id = record.id;
  if (!records_.try_emplace(id, std::move(record)).second) {
    return absl::AlreadyExistsError(absl::StrCat("sandbox \"", id, "\" already exists"));
  }
  return absl::OkStatus();
}

absl::Status Registry::Restore(SandboxRecord record) {
  record.state = SandboxState::kReady;
  record.last_transition = clock_->Now();
  absl::MutexLock lock(&mu_);
  std::string id = record.id;
  if (!records_.try_emplace(id, std::move(record)).second) {
    return absl::AlreadyExistsError(absl::StrCat("sandbox \"", id, "\" already exists"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SandboxRecord> Registry::Get(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return NotFound(id);
  return it->second;
}

std::vector<SandboxRecord> Registry::List() const {
  std::vector<SandboxRecord> out;
  {
    absl::MutexLock lock(&mu_);
    out.reserve(records_.size());
    for (const auto& [id, record] : records_) out.push_back(record);
  }
  std::sort(out.begin(), out.end(), [](const SandboxRecord& a, const SandboxRecord& b) {
    return std::tie(a.created, a.id) < std::tie(b.created, b.id);
  });
  return out;
}

absl::Status Registry::SetState(absl::string_view id, SandboxState state) {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return NotFound(id);
  it->second.state = state;
  it->second.last_transition = now;
  return absl::OkStatus();
}

absl::Status Registry::SetPaused(absl::string_view id, bool paused) {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return NotFound(id);
  it->second.paused = paused;
  return absl::OkStatus();
}

bool Registry::CompareAndSetState(absl::string_view id, SandboxState from, SandboxState to) {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end() || it->second.state != from) return false;
  it->second.state = to;
  it->second.last_transition = now;
  return true;
}

absl::StatusOr<SandboxRecord> Registry::BeginRecycle(absl::string_view id) {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return NotFound(id);
  if (it->second.state == SandboxState::kRecycling) {
    return absl::FailedPreconditionError(
        absl::StrCat("sandbox \"", id, "\" is already being deleted"));
  }
  if (it->second.state == SandboxState::kCreating) {
    return absl::FailedPreconditionError(
        absl::StrCat("sandbox \"", id, "\" is still being created; retry in a moment"));
  }
  it->second.state = SandboxState::kRecycling;
  it->second.last_transition = now;
  return it->second;
}

absl::StatusOr<absl::Time> Registry::Renew(absl::string_view id, absl::Time expires_at) {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return NotFound(id);
  if (!Serving(it->second.state)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sandbox \"", id, "\" is ", StateName(it->second.state), " and cannot be renewed"));
  }
  if (expires_at <= now) {
    return absl::InvalidArgumentError("the new expiry is not in the future; give a later time");
  }
  it->second.expires_at = expires_at;
  return expires_at;
}

absl::Status Registry::Remove(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  if (records_.erase(id) == 0) return NotFound(id);
  return absl::OkStatus();
}

std::vector<std::string> Registry::TakeExpired() {
  absl::Time now = clock_->Now();
  std::vector<std::string> expired;
  absl::MutexLock lock(&mu_);
  for (auto& [id, record] : records_) {
    if (Serving(record.state) && record.expires_at <= now) {
      record.state = SandboxState::kRecycling;
      record.last_transition = now;
      expired.push_back(id);
    }
  }
  std::sort(expired.begin(), expired.end());
  return expired;
}

bool Registry::TokenMatches(absl::string_view id, absl::string_view token) const {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(id);
  return it != records_.end() && !it->second.token.empty() &&
         ConstantTimeEquals(it->second.token, token);
}

std::map<SandboxState, int> Registry::CountByState() const {
  std::map<SandboxState, int> counts;
  for (SandboxState state : kAllStates) counts[state] = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, record] : records_) ++counts[record.state];
  return counts;
}

size_t Registry::size() const {
  absl::MutexLock lock(&mu_);
  return records_.size();
}

}  // namespace moat::agent
