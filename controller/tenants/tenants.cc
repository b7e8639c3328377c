#include "controller/tenants/tenants.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "util/quote.h"
#include "util/status_macros.h"

namespace moat::controller {
namespace {

using nlohmann::json;
constexpr char kTenantPrefix[] = "tenants/";
constexpr char kKeyPrefix[] = "apikeys/";

std::string Sha256(absl::string_view s) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), out);
  return std::string(reinterpret_cast<char*>(out), sizeof(out));
}

json QuotaJson(const TenantQuota& q) {
  return {{"max_sandboxes", q.max_sandboxes},
          {"max_cpu", q.max_cpu},
          {"max_memory", q.max_memory},
          {"creates_per_minute", q.creates_per_minute}};
}

TenantQuota QuotaFromJson(const json& j) {
  TenantQuota q;
  q.max_sandboxes = j.value("max_sandboxes", 0);
  q.max_cpu = j.value("max_cpu", 0.0);
  q.max_memory = j.value("max_memory", uint64_t{0});
  q.creates_per_minute = j.value("creates_per_minute", 0.0);
  return q;
}

std::string EncodeTenant(const TenantRecord& t) {
  return json{{"name", t.name},
              {"quota", QuotaJson(t.quota)},
              {"created_ms", absl::ToUnixMillis(t.created_at)}}
      .dump();
}

absl::StatusOr<TenantRecord> DecodeTenant(absl::string_view text) {
  try {
    json j = json::parse(text);
    return TenantRecord{j.at("name").get<std::string>(), QuotaFromJson(j.at("quota")),
                        absl::FromUnixMillis(j.at("created_ms").get<int64_t>())};
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("a tenant record in the store is damaged: ", e.what()));
  }
}

std::string EncodeKey(const KeyRecord& k) {
  return json{{"id", k.id},
              {"tenant", k.tenant},
              {"salt", k.hash.salt},
              {"hash", k.hash.hash},
              {"rounds", k.hash.rounds},
              {"created_ms", absl::ToUnixMillis(k.created_at)}}
      .dump();
}

absl::StatusOr<KeyRecord> DecodeKey(absl::string_view text) {
  try {
    json j = json::parse(text);
    KeyRecord k;
    k.id = j.at("id").get<std::string>();
    k.tenant = j.at("tenant").get<std::string>();
    k.hash = {j.at("salt").get<std::string>(), j.at("hash").get<std::string>(),
              j.at("rounds").get<int>()};
    k.created_at = absl::FromUnixMillis(j.at("created_ms").get<int64_t>());
    return k;
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("a key record in the store is damaged: ", e.what()));
  }
}

}  // namespace

bool IsValidTenantName(absl::string_view name) {
  if (name.empty() || name.size() > 63 || name[0] == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
  });
}

absl::StatusOr<TenantRecord> TenantRegistry::CreateTenant(const std::string& name,
                                                          const TenantQuota& quota) {
  if (!IsValidTenantName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad tenant name ", QuoteForMessage(name),
                     ": use 1-63 of a-z, 0-9 and '-', not starting with '-'"));
  }
  TenantRecord t{name, quota, clock_->Now()};
  std::string key = absl::StrCat(kTenantPrefix, name);
  absl::StatusOr<int64_t> committed =
      store_->Commit(WriteBatch().Require(key, 0).Put(key, EncodeTenant(t)));
  if (absl::IsFailedPrecondition(committed.status())) {
    return absl::AlreadyExistsError(absl::StrCat("tenant ", QuoteForMessage(name), " exists"));
  }
  RETURN_IF_ERROR(committed.status());
  return t;
}

absl::StatusOr<TenantRecord> TenantRegistry::GetTenant(const std::string& name) const {
  if (!IsValidTenantName(name)) {
    return absl::NotFoundError(absl::StrCat("no tenant ", QuoteForMessage(name)));
  }
  ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store_->Get(absl::StrCat(kTenantPrefix, name)));
  if (!kv.has_value())
    return absl::NotFoundError(absl::StrCat("no tenant ", QuoteForMessage(name)));
  return DecodeTenant(kv->value);
}

absl::StatusOr<TenantRecord> TenantRegistry::SetQuota(const std::string& name,
                                                      const TenantQuota& quota) {
  std::string key = absl::StrCat(kTenantPrefix, name);
  ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store_->Get(key));
  if (!kv.has_value())
    return absl::NotFoundError(absl::StrCat("no tenant ", QuoteForMessage(name)));
  ASSIGN_OR_RETURN(TenantRecord t, DecodeTenant(kv->value));
  t.quota = quota;
  // Against the revision read: a concurrent change makes this fail rather than be lost.
  absl::StatusOr<int64_t> committed =
      store_->Commit(WriteBatch().Require(key, kv->revision).Put(key, EncodeTenant(t)));
  if (absl::IsFailedPrecondition(committed.status())) {
    return absl::AbortedError(
        absl::StrCat("tenant ", QuoteForMessage(name), " changed meanwhile; retry"));
  }
  RETURN_IF_ERROR(committed.status());
  return t;
}

absl::StatusOr<std::vector<TenantRecord>> TenantRegistry::ListTenants() const {
  ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, store_->List(kTenantPrefix));
  std::vector<TenantRecord> out;
  for (const KeyValue& kv : kvs) {
    ASSIGN_OR_RETURN(TenantRecord t, DecodeTenant(kv.value));
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<TenantQuota> TenantRegistry::QuotaOf(const std::string& tenant) const {
  absl::StatusOr<TenantRecord> t = GetTenant(tenant);
  if (absl::IsNotFound(t.status())) return TenantQuota{};
  RETURN_IF_ERROR(t.status());
  return t->quota;
}

absl::StatusOr<IssuedKey> TenantRegistry::NewKeyFor(const std::string& tenant) {
  ASSIGN_OR_RETURN(NewKey key, MakeKey(hash_rounds_));
  return IssuedKey{KeyRecord{key.id, tenant, key.hash, clock_->Now()}, key.plaintext};
}

absl::StatusOr<IssuedKey> TenantRegistry::CreateKey(const std::string& tenant) {
  RETURN_IF_ERROR(GetTenant(tenant).status());
  ASSIGN_OR_RETURN(IssuedKey issued, NewKeyFor(tenant));
  std::string key = absl::StrCat(kKeyPrefix, issued.record.id);
  RETURN_IF_ERROR(
      store_->Commit(WriteBatch().Require(key, 0).Put(key, EncodeKey(issued.record))).status());
  return issued;
}

absl::StatusOr<std::vector<KeyRecord>> TenantRegistry::ListKeys(const std::string& tenant) const {
  RETURN_IF_ERROR(GetTenant(tenant).status());
  ASSIGN_OR_RETURN(std::vector<KeyValue> kvs, store_->List(kKeyPrefix));
  std::vector<KeyRecord> out;
  for (const KeyValue& kv : kvs) {
    ASSIGN_OR_RETURN(KeyRecord k, DecodeKey(kv.value));
    if (k.tenant == tenant) out.push_back(std::move(k));
  }
  return out;
}

absl::StatusOr<std::optional<KeyRecord>> TenantRegistry::ReadKey(const std::string& id) const {
  ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store_->Get(absl::StrCat(kKeyPrefix, id)));
  if (!kv.has_value()) return std::nullopt;
  return DecodeKey(kv->value);
}

absl::StatusOr<IssuedKey> TenantRegistry::RotateKey(const std::string& id) {
  std::string old_key = absl::StrCat(kKeyPrefix, id);
  ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store_->Get(old_key));
  if (!IsValidKey(old_key) || !kv.has_value()) {
    return absl::NotFoundError(absl::StrCat("no API key ", QuoteForMessage(id)));
  }
  ASSIGN_OR_RETURN(KeyRecord old, DecodeKey(kv->value));
  ASSIGN_OR_RETURN(IssuedKey issued, NewKeyFor(old.tenant));
  std::string new_key = absl::StrCat(kKeyPrefix, issued.record.id);
  absl::StatusOr<int64_t> committed = store_->Commit(WriteBatch()
                                                         .Require(old_key, kv->revision)
                                                         .Require(new_key, 0)
                                                         .Delete(old_key)
                                                         .Put(new_key, EncodeKey(issued.record)));
  if (absl::IsFailedPrecondition(committed.status())) {
    return absl::AbortedError(
        absl::StrCat("API key ", QuoteForMessage(id), " changed meanwhile; retry"));
  }
  RETURN_IF_ERROR(committed.status());
  absl::MutexLock lock(&mu_);
  verified_.erase(id);
  return issued;
}

absl::Status TenantRegistry::RevokeKey(const std::string& id) {
  std::string key = absl::StrCat(kKeyPrefix, id);
  if (!IsValidKey(key))
    return absl::NotFoundError(absl::StrCat("no API key ", QuoteForMessage(id)));
  ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store_->Get(key));
  if (!kv.has_value()) return absl::NotFoundError(absl::StrCat("no API key ", QuoteForMessage(id)));
  RETURN_IF_ERROR(store_->Commit(WriteBatch().Delete(key)).status());
  absl::MutexLock lock(&mu_);
  verified_.erase(id);
  return absl::OkStatus();
}

absl::StatusOr<std::string> TenantRegistry::Authenticate(absl::string_view plaintext) {
  const absl::Status wrong = absl::UnauthenticatedError("wrong API key");
  absl::StatusOr<std::string> id = KeyId(plaintext);
  if (!id.ok()) return wrong;
  const std::string digest = Sha256(plaintext);
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = verified_.find(*id);
    if (it != verified_.end() && it->second.until > now) {
      if (CRYPTO_memcmp(it->second.digest.data(), digest.data(), digest.size()) == 0) {
        return it->second.tenant;
      }
      return wrong;
    }
  }
  ASSIGN_OR_RETURN(std::optional<KeyRecord> record, ReadKey(*id));
  if (!record.has_value()) return wrong;
  {
    absl::MutexLock lock(&mu_);
    Hashing& h = hashing_[*id];
    if (now - h.second >= absl::Seconds(1)) h = {now, 0};
    if (++h.count > kMaxHashesPerSecond) return wrong;
  }
  if (!VerifyKey(plaintext, record->hash)) return wrong;
  absl::MutexLock lock(&mu_);
  verified_[*id] = Verified{digest, record->tenant, now + kKeyCacheTtl};
  return record->tenant;
}

}  // namespace moat::controller
