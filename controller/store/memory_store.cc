#include "controller/store/memory_store.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace moat::controller {

absl::StatusOr<std::optional<KeyValue>> MemoryStore::Get(absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::vector<KeyValue>> MemoryStore::List(absl::string_view prefix) const {
  absl::MutexLock lock(&mu_);
  std::vector<KeyValue> out;
  for (auto it = data_.lower_bound(prefix);
       it != data_.end() && absl::StartsWith(it->first, prefix); ++it) {
    out.push_back(it->second);
  }
  return out;
}

absl::StatusOr<int64_t> MemoryStore::Commit(const WriteBatch& batch) {
  for (const auto& [key, value] : batch.puts) {
    if (!IsValidKey(key)) return absl::InvalidArgumentError(absl::StrCat("bad store key ", key));
  }
  absl::MutexLock lock(&mu_);
  for (const Precondition& p : batch.preconditions) {
    auto it = data_.find(p.key);
    int64_t now = it == data_.end() ? 0 : it->second.revision;
    if (now != p.revision) {
      return absl::FailedPreconditionError(absl::StrCat(
          "store key \"", p.key, "\" changed: revision ", now, ", expected ", p.revision));
    }
  }
  ++revision_;
  for (const std::string& key : batch.deletes) data_.erase(key);
  for (const auto& [key, value] : batch.puts) data_[key] = KeyValue{key, value, revision_};
  return revision_;
}

absl::StatusOr<int64_t> MemoryStore::Revision() const {
  absl::MutexLock lock(&mu_);
  return revision_;
}

}  // namespace moat::controller
