#include "controller/store/etcd_store.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace moat::controller {
namespace {

using nlohmann::json;

constexpr int kListPage = 1000;

absl::StatusOr<KeyValue> FromEtcd(const json& kv, size_t prefix_size) {
  KeyValue out;
  ASSIGN_OR_RETURN(std::string key, Base64Decode(kv.value("key", "")));
  out.key = key.substr(std::min(prefix_size, key.size()));
  ASSIGN_OR_RETURN(out.value, Base64Decode(kv.value("value", "")));
  out.revision = JsonInt(kv, "mod_revision");
  return out;
}

// Every key a batch reads or writes (groups must not share one: etcd refuses a txn that puts
// a key twice, and a shared precondition would couple two callers' outcomes).
std::set<std::string> KeysOf(const WriteBatch& b) {
  std::set<std::string> keys;
  for (const Precondition& p : b.preconditions) keys.insert(p.key);
  for (const auto& [key, value] : b.puts) keys.insert(key);
  for (const std::string& key : b.deletes) keys.insert(key);
  return keys;
}

int OpsOf(const WriteBatch& b) { return int(b.puts.size() + b.deletes.size()); }

}  // namespace

EtcdStore::EtcdStore(const EtcdClient* client, EtcdStoreOptions options)
    : client_(client), options_(std::move(options)) {
  for (int i = 0; i < std::max(1, options_.committers); ++i) {
    committers_.emplace_back([this] { CommitLoop(); });
  }
}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(const EtcdClient* client,
                                                           EtcdStoreOptions options) {
  auto store = std::unique_ptr<EtcdStore>(new EtcdStore(client, std::move(options)));
  absl::StatusOr<int64_t> revision = store->Revision();
  if (!revision.ok()) {
    return absl::UnavailableError(absl::StrCat("the etcd store: ", revision.status().message(),
                                               "; check store.endpoints and that the members run"));
  }
  return store;
}

EtcdStore::~EtcdStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : committers_) t.join();
}

absl::StatusOr<std::optional<KeyValue>> EtcdStore::Get(absl::string_view key) const {
  ASSIGN_OR_RETURN(
      json answer,
      client_->Call("/v3/kv/range", {{"key", Base64Encode(options_.prefix + std::string(key))}}));
  if (!answer.contains("kvs") || answer["kvs"].empty()) return std::nullopt;
  return FromEtcd(answer["kvs"][0], options_.prefix.size());
}

absl::StatusOr<std::vector<KeyValue>> EtcdStore::List(absl::string_view prefix) const {
  const std::string full = options_.prefix + std::string(prefix);
  const std::string end = Base64Encode(PrefixEnd(full));
  std::vector<KeyValue> out;
  std::string from = full;
  int64_t revision = 0;  // Every page at the first page's revision: one consistent snapshot.
  while (true) {
    json request = {{"key", Base64Encode(from)}, {"range_end", end}, {"limit", kListPage}};
    if (revision != 0) request["revision"] = std::to_string(revision);
    ASSIGN_OR_RETURN(json answer, client_->Call("/v3/kv/range", request));
    if (revision == 0) revision = JsonInt(answer.value("header", json::object()), "revision");
    const json kvs = answer.value("kvs", json::array());
    for (const json& kv : kvs) {
      ASSIGN_OR_RETURN(KeyValue v, FromEtcd(kv, options_.prefix.size()));
      out.push_back(std::move(v));
    }
    if (!answer.value("more", false) || kvs.empty()) break;
    from = options_.prefix + out.back().key + std::string(1, '\0');
  }
  return out;
}

absl::StatusOr<int64_t> EtcdStore::Revision() const {
  ASSIGN_OR_RETURN(json answer,
                   client_->Call("/v3/kv/range",
                                 {{"key", Base64Encode(options_.prefix)}, {"count_only", true}}));
  return JsonInt(answer.value("header", json::object()), "revision");
}

int64_t EtcdStore::transactions() const {
  absl::MutexLock lock(&mu_);
  return transactions_;
}

absl::StatusOr<int64_t> EtcdStore::Commit(const WriteBatch& batch) {
  for (const auto& [key, value] : batch.puts) {
    if (!IsValidKey(key)) return absl::InvalidArgumentError(absl::StrCat("bad store key ", key));
  }
  if (OpsOf(batch) > options_.max_txn_ops ||
      int(batch.preconditions.size()) + 1 > options_.max_txn_ops) {
    return absl::InvalidArgumentError(absl::StrCat("a store batch of ", OpsOf(batch),
                                                   " operations and ", batch.preconditions.size(),
                                                   " preconditions is larger than one etcd "
                                                   "transaction (",
                                                   options_.max_txn_ops, "): split it"));
  }
  Pending pending{&batch, std::nullopt};
  absl::MutexLock lock(&mu_);
  queue_.push_back(&pending);
  mu_.Await(absl::Condition(
      +[](Pending* p) { return p->result.has_value(); }, &pending));
  return *std::move(pending.result);
}

void EtcdStore::CommitLoop() {
  while (true) {
    std::vector<Pending*> group;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](EtcdStore* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stopping_ || !s->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // Stopping, and nobody waits.
      // As many queued batches, in order, as fit one transaction without sharing a key.
      std::set<std::string> keys;
      int ops = 0, compares = 1;  // The fence's compare.
      while (!queue_.empty()) {
        const WriteBatch& b = *queue_.front()->batch;
        std::set<std::string> mine = KeysOf(b);
        bool shares = false;
        for (const std::string& k : mine) shares = shares || keys.count(k) > 0;
        if (!group.empty() && (shares || ops + OpsOf(b) > options_.max_txn_ops ||
                               compares + int(b.preconditions.size()) > options_.max_txn_ops)) {
          break;
        }
        keys.insert(mine.begin(), mine.end());
        ops += OpsOf(b);
        compares += int(b.preconditions.size());
        group.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    std::optional<Fence> fence;
    bool fenced = bool(options_.fence);
    if (fenced) fence = options_.fence();
    absl::Status refused = absl::UnavailableError(
        "this controller is not the leader: writes go to the leader (is it changing? retry)");
    if (fenced && !fence) {
      absl::MutexLock lock(&mu_);
      for (Pending* p : group) p->result = refused;
      continue;
    }
    Send(group, fence);
  }
}

void EtcdStore::Send(const std::vector<Pending*>& group, const std::optional<Fence>& fence) {
  std::vector<const WriteBatch*> batches;
  for (Pending* p : group) batches.push_back(p->batch);
  bool held = true;
  absl::StatusOr<int64_t> result = Txn(batches, fence, &held);
  std::vector<absl::StatusOr<int64_t>> results(group.size(), result);
  if (!held && group.size() > 1) {
    // Some batch's precondition failed: find which, each alone.
    for (size_t i = 0; i < group.size(); ++i) results[i] = Txn({batches[i]}, fence, &held);
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < group.size(); ++i) group[i]->result = results[i];
}

absl::StatusOr<int64_t> EtcdStore::Txn(const std::vector<const WriteBatch*>& batches,
                                       const std::optional<Fence>& fence,
                                       bool* preconditions_held) {
  *preconditions_held = true;
  json compare = json::array(), success = json::array(), failure = json::array();
  if (fence) {
    compare.push_back({{"target", "CREATE"},
                       {"key", Base64Encode(fence->key)},
                       {"create_revision", std::to_string(fence->revision)},
                       {"result", "EQUAL"}});
    // On failure, the fence key: was it the fence or a precondition that failed?
    failure.push_back({{"request_range", {{"key", Base64Encode(fence->key)}}}});
  }
  for (const WriteBatch* b : batches) {
    for (const Precondition& p : b->preconditions) {
      json c = {{"key", Base64Encode(options_.prefix + p.key)}, {"result", "EQUAL"}};
      if (p.revision == 0) {
        c["target"] = "CREATE";
        c["create_revision"] = "0";
      } else {
        c["target"] = "MOD";
        c["mod_revision"] = std::to_string(p.revision);
      }
      compare.push_back(std::move(c));
    }
    for (const std::string& key : b->deletes) {
      success.push_back({{"request_delete_range", {{"key", Base64Encode(options_.prefix + key)}}}});
    }
    for (const auto& [key, value] : b->puts) {
      success.push_back(
          {{"request_put",
            {{"key", Base64Encode(options_.prefix + key)}, {"value", Base64Encode(value)}}}});
    }
  }
  {
    absl::MutexLock lock(&mu_);
    ++transactions_;
  }
  absl::StatusOr<json> answer = client_->Call(
      "/v3/kv/txn", {{"compare", compare}, {"success", success}, {"failure", failure}});
  if (!answer.ok()) {
    if (absl::IsInvalidArgument(answer.status())) return answer.status();
    // A timeout leaves the outcome unknown; the caller did not get an acknowledgement.
    return absl::UnavailableError(
        absl::StrCat("the etcd store could not commit (it may or may not have been applied): ",
                     answer.status().message()));
  }
  if (answer->value("succeeded", false)) {
    return JsonInt(answer->value("header", json::object()), "revision");
  }
  if (fence) {
    const json& responses = answer->value("responses", json::array());
    const json range =
        responses.empty() ? json::object() : responses[0].value("response_range", json::object());
    const json kvs = range.value("kvs", json::array());
    if (kvs.empty() || JsonInt(kvs[0], "create_revision") != fence->revision) {
      return absl::UnavailableError(absl::StrCat(
          "this controller was deposed: its leader key \"", fence->key, "\" (revision ",
          fence->revision, ") is gone, so the write was refused; the new leader takes writes"));
    }
  }
  *preconditions_held = false;
  return absl::FailedPreconditionError(
      "a store key changed since it was read (a precondition failed); nothing was written");
}

}  // namespace moat::controller
