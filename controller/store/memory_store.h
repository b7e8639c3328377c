// The in-memory store: the fake for tests and `store: {kind: memory}` (nothing survives a
// restart). Same semantics as SqliteStore, checked by the same tests (store_test.cc).
#pragma once

#include <map>

#include "absl/synchronization/mutex.h"
#include "controller/store/store.h"

namespace moat::controller {

class MemoryStore final : public Store {
 public:
  absl::StatusOr<std::optional<KeyValue>> Get(absl::string_view key) const override;
  absl::StatusOr<std::vector<KeyValue>> List(absl::string_view prefix) const override;
  absl::StatusOr<int64_t> Commit(const WriteBatch& batch) override;
  absl::StatusOr<int64_t> Revision() const override;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, KeyValue, std::less<>> data_ ABSL_GUARDED_BY(mu_);
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace moat::controller
