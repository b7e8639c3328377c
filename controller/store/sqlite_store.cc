#include "controller/store/sqlite_store.h"

#include <sqlite3.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace moat::controller {
namespace {

constexpr char kSchema[] =
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
    "revision INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "INSERT OR IGNORE INTO meta (name, value) VALUES ('revision', 0);";

// Resets a prepared statement when the scope ends, whatever path leaves it.
class Reset {
 public:
  explicit Reset(sqlite3_stmt* s) : s_(s) {}
  ~Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }

 private:
  sqlite3_stmt* s_;
};

void BindText(sqlite3_stmt* s, int i, absl::string_view text) {
  sqlite3_bind_text(s, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

std::string ColumnText(sqlite3_stmt* s, int i) {
  const void* data = sqlite3_column_blob(s, i);
  int n = sqlite3_column_bytes(s, i);
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), n);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                               SqliteStoreOptions options) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open the store \"", path, "\": ", message,
                                               "; check that state_dir exists and is writable"));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(path, db));
  RETURN_IF_ERROR(store->Prepare());
  absl::MutexLock lock(&store->mu_);
  std::string pragmas = absl::StrCat(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=", options.full_sync ? "FULL" : "NORMAL", ";");
  if (sqlite3_exec(db, pragmas.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    return store->Error("setting WAL mode");
  }
  return store;
}

absl::Status SqliteStore::Prepare() {
  absl::MutexLock lock(&mu_);
  sqlite3_busy_timeout(db_, 5000);
  if (sqlite3_exec(db_, kSchema, nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Error("creating the schema");
  }
  struct {
    sqlite3_stmt** stmt;
    const char* sql;
  } statements[] = {
      {&get_, "SELECT key, value, revision FROM kv WHERE key = ?1"},
      // Keys are printable ASCII (IsValidKey), so every key with the prefix sorts between the
      // prefix and the prefix followed by the highest printable byte.
      {&list_, "SELECT key, value, revision FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key"},
      {&put_,
       "INSERT INTO kv (key, value, revision) VALUES (?1, ?2, ?3) ON CONFLICT(key) DO "
       "UPDATE SET value = excluded.value, revision = excluded.revision"},
      {&delete_, "DELETE FROM kv WHERE key = ?1"},
      {&set_revision_, "UPDATE meta SET value = ?1 WHERE name = 'revision'"},
  };
  for (auto& s : statements) {
    if (sqlite3_prepare_v3(db_, s.sql, -1, SQLITE_PREPARE_PERSISTENT, s.stmt, nullptr) !=
        SQLITE_OK) {
      return Error(absl::StrCat("preparing \"", s.sql, "\""));
    }
  }
  sqlite3_stmt* rev = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE name = 'revision'", -1, &rev,
                         nullptr) != SQLITE_OK) {
    return Error("reading the revision");
  }
  if (sqlite3_step(rev) == SQLITE_ROW) revision_ = sqlite3_column_int64(rev, 0);
  sqlite3_finalize(rev);
  return absl::OkStatus();
}

SqliteStore::~SqliteStore() {
  absl::MutexLock lock(&mu_);
  for (sqlite3_stmt* s : {get_, list_, put_, delete_, set_revision_}) sqlite3_finalize(s);
  sqlite3_close(db_);
}

absl::Status SqliteStore::Error(absl::string_view what) const {
  return absl::UnavailableError(
      absl::StrCat("store \"", path_, "\": ", what, " failed: ", sqlite3_errmsg(db_)));
}

absl::StatusOr<std::optional<KeyValue>> SqliteStore::Get(absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  Reset reset(get_);
  BindText(get_, 1, key);
  int rc = sqlite3_step(get_);
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) return Error("reading a key");
  return KeyValue{ColumnText(get_, 0), ColumnText(get_, 1), sqlite3_column_int64(get_, 2)};
}

absl::StatusOr<std::vector<KeyValue>> SqliteStore::List(absl::string_view prefix) const {
  absl::MutexLock lock(&mu_);
  Reset reset(list_);
  BindText(list_, 1, prefix);
  std::string end = absl::StrCat(prefix, "\x7f");
  BindText(list_, 2, end);
  std::vector<KeyValue> out;
  int rc;
  while ((rc = sqlite3_step(list_)) == SQLITE_ROW) {
    out.push_back({ColumnText(list_, 0), ColumnText(list_, 1), sqlite3_column_int64(list_, 2)});
  }
  if (rc != SQLITE_DONE) return Error("listing keys");
  return out;
}

absl::Status SqliteStore::CommitLocked(const WriteBatch& batch, int64_t revision) {
  for (const Precondition& p : batch.preconditions) {
    Reset reset(get_);
    BindText(get_, 1, p.key);
    int rc = sqlite3_step(get_);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error("checking a precondition");
    int64_t now = rc == SQLITE_ROW ? sqlite3_column_int64(get_, 2) : 0;
    if (now != p.revision) {
      return absl::FailedPreconditionError(absl::StrCat(
          "store key \"", p.key, "\" changed: revision ", now, ", expected ", p.revision));
    }
  }
  for (const std::string& key : batch.deletes) {
    Reset reset(delete_);
    BindText(delete_, 1, key);
    if (sqlite3_step(delete_) != SQLITE_DONE) return Error("deleting a key");
  }
  for (const auto& [key, value] : batch.puts) {
    Reset reset(put_);
    BindText(put_, 1, key);
    sqlite3_bind_blob(put_, 2, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(put_, 3, revision);
    if (sqlite3_step(put_) != SQLITE_DONE) return Error("writing a key");
  }
  Reset reset(set_revision_);
  sqlite3_bind_int64(set_revision_, 1, revision);
  if (sqlite3_step(set_revision_) != SQLITE_DONE) return Error("writing the revision");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SqliteStore::Commit(const WriteBatch& batch) {
  for (const auto& [key, value] : batch.puts) {
    if (!IsValidKey(key)) return absl::InvalidArgumentError(absl::StrCat("bad store key ", key));
  }
  absl::MutexLock lock(&mu_);
  if (sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Error("beginning a transaction");
  }
  absl::Status status = CommitLocked(batch, revision_ + 1);
  if (status.ok() && sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    status = Error("committing");
  }
  if (!status.ok()) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return status;
  }
  return ++revision_;
}

absl::StatusOr<int64_t> SqliteStore::Revision() const {
  absl::MutexLock lock(&mu_);
  return revision_;
}

}  // namespace moat::controller
