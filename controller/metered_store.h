// A Store that times every call of another into moat_controller_store_request_duration_seconds
// (op get, list, commit), whichever engine is behind it (SQLite, memory, etcd).
#pragma once

#include "controller/metrics.h"
#include "controller/store/store.h"

namespace moat::controller {

class MeteredStore final : public Store {
 public:
  // Both must outlive this.
  MeteredStore(Store* inner, ControllerMetrics* metrics) : inner_(inner), metrics_(metrics) {}

  absl::StatusOr<std::optional<KeyValue>> Get(absl::string_view key) const override;
  absl::StatusOr<std::vector<KeyValue>> List(absl::string_view prefix) const override;
  absl::StatusOr<int64_t> Commit(const WriteBatch& batch) override;
  absl::StatusOr<int64_t> Revision() const override { return inner_->Revision(); }

 private:
  Store* inner_;
  ControllerMetrics* metrics_;
};

}  // namespace moat::controller
