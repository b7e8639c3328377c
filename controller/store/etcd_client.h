// A small client for etcd's v3 JSON gateway (etcd 3.4, Debian `etcd-server`): POST a JSON body
// to /v3/kv/range, /v3/kv/txn, /v3/lease/*, /v3/election/*; keys and values travel base64,
// int64 fields as JSON strings. It speaks to one member at a time and moves to the next endpoint
// when one does not answer; any member serves every call (it forwards to the raft leader).
//
// What it does not do: consensus. Leases, elections and transactions are etcd's own.
//
// Thread-safe: each call takes an HTTP connection from a small pool (cpp-httplib serialises
// requests on one client object), so concurrent callers do not wait for each other.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace httplib {
class Client;
}

namespace moat::controller {

struct EtcdClientOptions {
  std::vector<std::string> endpoints;  // "http://127.0.0.1:2379" or "https://...".
  // TLS (https endpoints): the CA that signed the members' certificates, and the client's own
  // certificate and key if the members ask for one (--client-cert-auth).
  std::string ca_file, cert_file, key_file;
  absl::Duration timeout = absl::Seconds(5);  // Per call; a campaign passes its own.
};

// A key etcd's election API made for a campaign that won: its existence with this create
// revision is what "still the leader" means (etcd's concurrency.Election does the same).
struct LeaderKey {
  std::string name;  // The election's name.
  std::string key;   // name + "/" + lease id in hex.
  int64_t revision = 0;
  int64_t lease = 0;
};

std::string Base64Encode(absl::string_view bytes);
absl::StatusOr<std::string> Base64Decode(absl::string_view text);
// etcd's int64 fields come as strings ("12"); absent means 0.
int64_t JsonInt(const nlohmann::json& object, const char* field);
// The smallest key greater than every key starting with `prefix` (etcd's range_end for a
// prefix); "\0" for an empty prefix (every key).
std::string PrefixEnd(absl::string_view prefix);

class EtcdClient {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdClientOptions options);
  ~EtcdClient();

  // POSTs `body` to the gateway path ("/v3/kv/range") and returns the parsed answer. Unavailable
  // when no endpoint answered, the answer did not come within `timeout` (0: the client's) or
  // etcd answered 5xx (quorum lost, leader changing). Only a refused connection moves on to the
  // next endpoint: a call that may have reached etcd is never sent twice.
  absl::StatusOr<nlohmann::json> Call(absl::string_view path, const nlohmann::json& body,
                                      absl::Duration timeout = absl::ZeroDuration()) const;

  // Leases. KeepAlive returns the remaining TTL, or NotFound once the lease has expired.
  absl::StatusOr<int64_t> LeaseGrant(absl::Duration ttl) const;
  absl::StatusOr<absl::Duration> LeaseKeepAlive(int64_t lease) const;
  absl::Status LeaseRevoke(int64_t lease) const;

  // Elections. Campaign blocks until `lease`'s key is the oldest under `name` (elected), the
  // call times out (Unavailable; the candidacy stays while the lease lives, and campaigning
  // again with the same lease keeps its place) or CancelCampaigns (Cancelled) is
  // called. Leader is the current leader's value, nullopt if there is none.
  absl::StatusOr<LeaderKey> Campaign(const std::string& name, int64_t lease,
                                     absl::string_view value, absl::Duration timeout) const;
  absl::StatusOr<std::optional<std::string>> Leader(const std::string& name) const;
  absl::Status Resign(const LeaderKey& leader) const;
  // Closes the connections of campaigns in flight (shutdown).
  void CancelCampaigns() const;

 private:
  explicit EtcdClient(EtcdClientOptions options);
  std::unique_ptr<httplib::Client> NewClient(const std::string& endpoint) const;
  absl::StatusOr<nlohmann::json> CallOnce(httplib::Client& client, const std::string& endpoint,
                                          absl::string_view path, const std::string& body,
                                          absl::Duration timeout, bool* try_next) const;

  const EtcdClientOptions options_;
  mutable absl::Mutex mu_;
  // Idle connections per endpoint index, and the endpoint that answered last.
  mutable std::vector<std::vector<std::unique_ptr<httplib::Client>>> idle_ ABSL_GUARDED_BY(mu_);
  mutable size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  // Connections of campaigns in flight, so CancelCampaigns can stop them.
  mutable std::vector<httplib::Client*> campaigns_ ABSL_GUARDED_BY(mu_);
  mutable bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moat::controller
