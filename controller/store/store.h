// The controller's durable state behind one narrow interface, in the shape of etcd's key-value
// API so that an etcd engine drops in beside SQLite: keys are paths ("sandboxes/sb-1"), values
// opaque bytes (JSON), every change bumps one store-wide revision, and a batch of puts and
// deletes commits atomically if its preconditions (a key's revision, 0 for absent) still hold.
// That is etcd's Txn(Compare mod_revision).Then(Put..., Delete...), and SQLite's transaction.
//
// Readers and writers are separate interfaces so code that only reads (list, reconcile) says
// so. Engines: MemoryStore (tests, `store: {kind: memory}`), SqliteStore (the default).
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::controller {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t revision = 0;  // The store revision of the key's last change (etcd's mod_revision).
};

struct Precondition {
  std::string key;
  int64_t revision = 0;  // The key must have this revision now; 0: the key must be absent.
};

struct WriteBatch {
  std::vector<Precondition> preconditions;
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;  // Deleting an absent key is not an error.

  WriteBatch& Put(std::string key, std::string value) {
    puts.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  WriteBatch& Delete(std::string key) {
    deletes.push_back(std::move(key));
    return *this;
  }
  WriteBatch& Require(std::string key, int64_t revision) {
    preconditions.push_back({std::move(key), revision});
    return *this;
  }
};

class StoreReader {
 public:
  virtual ~StoreReader() = default;
  // The key's value, or nullopt if there is none.
  virtual absl::StatusOr<std::optional<KeyValue>> Get(absl::string_view key) const = 0;
  // Every key starting with `prefix`, in key order.
  virtual absl::StatusOr<std::vector<KeyValue>> List(absl::string_view prefix) const = 0;
};

class StoreWriter {
 public:
  virtual ~StoreWriter() = default;
  // Applies the whole batch or nothing. Returns the new store revision once the change is
  // durable (for SQLite: committed to its write-ahead log). FailedPrecondition if a
  // precondition does not hold (nothing is written); Unavailable if the engine failed.
  virtual absl::StatusOr<int64_t> Commit(const WriteBatch& batch) = 0;
};

class Store : public StoreReader, public StoreWriter {
 public:
  // The revision of the last commit (0 for an empty, new store).
  virtual absl::StatusOr<int64_t> Revision() const = 0;
};

// Keys are what callers make them; these checks keep them printable and bounded so every
// engine (etcd's are bytes, SQLite's text) stores them the same way.
bool IsValidKey(absl::string_view key);

}  // namespace moat::controller
