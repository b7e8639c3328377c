// The embedded default store: one SQLite database in the state directory, in WAL mode. A
// Commit returns once SQLite has committed the transaction to its write-ahead log, so whatever
// the controller acknowledged survives the controller's crash or kill -9 (synchronous=NORMAL);
// with full_sync it also survives the machine losing power (synchronous=FULL, ~25x slower here:
// docs/controller.md has the figures).
//
// Schema: kv(key TEXT PRIMARY KEY, value BLOB, revision INTEGER), meta(name, value) holding the
// store revision. One connection, serialised by a mutex: SQLite allows one writer anyway.
#pragma once

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "controller/store/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace moat::controller {

struct SqliteStoreOptions {
  bool full_sync = false;
};

class SqliteStore final : public Store {
 public:
  // Opens (creating if needed) the database file `path`; its directory must exist.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path,
                                                           SqliteStoreOptions options = {});
  ~SqliteStore() override;

  absl::StatusOr<std::optional<KeyValue>> Get(absl::string_view key) const override;
  absl::StatusOr<std::vector<KeyValue>> List(absl::string_view prefix) const override;
  absl::StatusOr<int64_t> Commit(const WriteBatch& batch) override;
  absl::StatusOr<int64_t> Revision() const override;

 private:
  SqliteStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  absl::Status Prepare();
  absl::Status Error(absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CommitLocked(const WriteBatch& batch, int64_t revision)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  // Prepared once; each is reset after use.
  sqlite3_stmt* get_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* list_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* put_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* delete_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* set_revision_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace moat::controller
