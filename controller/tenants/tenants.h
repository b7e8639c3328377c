// Tenants and their API keys, kept in the controller's store (store.h) under two prefixes, so
// every engine (memory, SQLite, etcd) holds them with no new store operation:
//   tenants/<name>  {"name", "quota": {...}, "created_ms"}
//   apikeys/<id>    {"id", "tenant", "salt", "hash", "rounds", "created_ms"}  (key_hash.h)
// Creates use a revision-0 precondition (a name or id is taken once); rotate replaces a key's
// record and its successor in one batch. The registry reads through to the store for every
// change, so several controller replicas on one store agree; it caches only keys it has
// verified (the SHA-256 of the plaintext, per key id, in memory), which a rotate or revoke on
// this replica drops at once and on another replica within kKeyCacheTtl.
//
// Thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/store/store.h"
#include "controller/tenants/key_hash.h"
#include "controller/tenants/quota.h"
#include "util/clock.h"

namespace moat::controller {

struct TenantRecord {
  std::string name;
  TenantQuota quota;
  absl::Time created_at;
};

struct KeyRecord {
  std::string id;
  std::string tenant;
  KeyHash hash;
  absl::Time created_at;
};

// A key just made: the plaintext is shown this once.
struct IssuedKey {
  KeyRecord record;
  std::string plaintext;
};

// Tenant names: 1-63 of [a-z0-9-], starting with a letter or digit (they become metric labels
// and store keys).
bool IsValidTenantName(absl::string_view name);

class TenantRegistry {
 public:
  static constexpr absl::Duration kKeyCacheTtl = absl::Seconds(10);
  // Slow hashes per key id and second, past which a key not in the cache is refused unhashed:
  // wrong secrets for a known id cannot buy the caller unbounded CPU.
  static constexpr int kMaxHashesPerSecond = 4;

  // `store` and `clock` must outlive the registry.
  TenantRegistry(Store* store, const Clock* clock, int hash_rounds = kDefaultKeyHashRounds)
      : store_(store), clock_(clock), hash_rounds_(hash_rounds) {}

  // AlreadyExists if the name is taken; InvalidArgument for a bad name.
  absl::StatusOr<TenantRecord> CreateTenant(const std::string& name, const TenantQuota& quota);
  absl::StatusOr<TenantRecord> SetQuota(const std::string& name, const TenantQuota& quota);
  absl::StatusOr<TenantRecord> GetTenant(const std::string& name) const;  // NotFound.
  absl::StatusOr<std::vector<TenantRecord>> ListTenants() const;
  // The tenant's quota; no limits for a tenant without a record (keys from api_keys_file).
  // Unavailable if the store cannot answer (the create is refused: fail closed).
  absl::StatusOr<TenantQuota> QuotaOf(const std::string& tenant) const;

  // A new key for an existing tenant (NotFound otherwise).
  absl::StatusOr<IssuedKey> CreateKey(const std::string& tenant);
  // The tenant's keys (their ids and dates; no hash leaves the registry through the API).
  absl::StatusOr<std::vector<KeyRecord>> ListKeys(const std::string& tenant) const;
  // A new key for the key `id`'s tenant; the old key stops working at once (one batch).
  absl::StatusOr<IssuedKey> RotateKey(const std::string& id);
  absl::Status RevokeKey(const std::string& id);  // NotFound for an unknown id.

  // The tenant a presented key belongs to; Unauthenticated if it is none of the stored keys.
  absl::StatusOr<std::string> Authenticate(absl::string_view plaintext);

 private:
  struct Verified {
    std::string digest;  // SHA-256 of the plaintext.
    std::string tenant;
    absl::Time until;
  };
  absl::StatusOr<std::optional<KeyRecord>> ReadKey(const std::string& id) const;
  absl::StatusOr<IssuedKey> NewKeyFor(const std::string& tenant);

  Store* store_;
  const Clock* clock_;
  const int hash_rounds_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Verified> verified_ ABSL_GUARDED_BY(mu_);
  struct Hashing {
    absl::Time second;
    int count = 0;
  };
  absl::flat_hash_map<std::string, Hashing> hashing_ ABSL_GUARDED_BY(mu_);  // Ids with records.
};

}  // namespace moat::controller
