#include "controller/metered_store.h"

namespace moat::controller {

absl::StatusOr<std::optional<KeyValue>> MeteredStore::Get(absl::string_view key) const {
  const absl::Time start = absl::Now();
  auto out = inner_->Get(key);
  metrics_->ObserveStore("get", absl::Now() - start);
  return out;
}

absl::StatusOr<std::vector<KeyValue>> MeteredStore::List(absl::string_view prefix) const {
  const absl::Time start = absl::Now();
  auto out = inner_->List(prefix);
  metrics_->ObserveStore("list", absl::Now() - start);
  return out;
}

absl::StatusOr<int64_t> MeteredStore::Commit(const WriteBatch& batch) {
  const absl::Time start = absl::Now();
  auto out = inner_->Commit(batch);
  metrics_->ObserveStore("commit", absl::Now() - start);
  return out;
}

}  // namespace moat::controller
