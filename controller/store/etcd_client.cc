#include "controller/store/etcd_client.h"

#include <httplib.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace moat::controller {
namespace {

using nlohmann::json;

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr size_t kMaxIdlePerEndpoint = 8;

void SetTimeout(httplib::Client& client, absl::Duration timeout) {
  int64_t us = absl::ToInt64Microseconds(timeout);
  client.set_read_timeout(us / 1'000'000, us % 1'000'000);
  client.set_write_timeout(us / 1'000'000, us % 1'000'000);
}

}  // namespace

std::string Base64Encode(absl::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out.push_back(kAlphabet[(n >> shift) & 63]);
  }
  if (size_t rest = bytes.size() - i; rest > 0) {
    uint32_t n = uint8_t(bytes[i]) << 16;
    if (rest == 2) n |= uint8_t(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

absl::StatusOr<std::string> Base64Decode(absl::string_view text) {
  std::string out;
  uint32_t n = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* p = std::find(kAlphabet, kAlphabet + 64, c);
    if (p == kAlphabet + 64) {
      return absl::DataLossError(absl::StrCat("etcd sent a value that is not base64: ", text));
    }
    n = (n << 6) | uint32_t(p - kAlphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((n >> bits) & 0xff));
    }
  }
  return out;
}

int64_t JsonInt(const json& object, const char* field) {
  if (!object.is_object()) return 0;
  auto it = object.find(field);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  int64_t v = 0;
  if (it->is_string() && absl::SimpleAtoi(it->get<std::string>(), &v)) return v;
  return 0;
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (uint8_t(end.back()) < 0xff) {
      end.back() = char(uint8_t(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdClientOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError(
        "etcd: no endpoints (store.endpoints: [\"http://127.0.0.1:2379\", ...])");
  }
  for (const std::string& e : options.endpoints) {
    if (!absl::StartsWith(e, "http://") && !absl::StartsWith(e, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint \"", e, "\" has no scheme: write http://HOST:PORT or https://HOST:PORT"));
    }
  }
  auto client = std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
  absl::MutexLock lock(&client->mu_);
  client->idle_.resize(client->options_.endpoints.size());
  return client;
}

EtcdClient::EtcdClient(EtcdClientOptions options) : options_(std::move(options)) {}
EtcdClient::~EtcdClient() = default;

std::unique_ptr<httplib::Client> EtcdClient::NewClient(const std::string& endpoint) const {
  auto client = options_.cert_file.empty() ? std::make_unique<httplib::Client>(endpoint)
                                           : std::make_unique<httplib::Client>(
                                                 endpoint, options_.cert_file, options_.key_file);
  if (!options_.ca_file.empty()) client->set_ca_cert_path(options_.ca_file.c_str());
  client->set_keep_alive(true);
  // Without it every call waits ~40 ms: httplib writes a request's head and body in two
  // segments, Nagle holds the body until the head is acknowledged, and etcd delays that ACK.
  client->set_tcp_nodelay(true);
  client->set_connection_timeout(1, 0);
  return client;
}

absl::StatusOr<json> EtcdClient::CallOnce(httplib::Client& client, const std::string& endpoint,
                                          absl::string_view path, const std::string& body,
                                          absl::Duration timeout, bool* try_next) const {
  *try_next = false;
  SetTimeout(client, timeout);
  httplib::Result res = client.Post(std::string(path).c_str(), body, "application/json");
  if (!res) {
    std::string what = absl::StrCat("etcd at ", endpoint, " did not answer ", path, " (",
                                    httplib::to_string(res.error()), ")");
    // Only a refused connection is known not to have reached etcd; the caller may try the next
    // member. Anything later (a timeout) may have been applied.
    *try_next = res.error() == httplib::Error::Connection;
    if (res.error() == httplib::Error::Read) {
      absl::StrAppend(&what, " within ", absl::FormatDuration(timeout),
                      " (has etcd lost its quorum? `etcdctl endpoint health`)");
    }
    return absl::UnavailableError(what);
  }
  json answer = json::parse(res->body, nullptr, false);
  if (res->status == 200 && answer.is_object()) {
    // Streaming calls (keepalive, watch) wrap each message in "result" or report "error".
    if (answer.contains("error") && answer["error"].is_object()) {
      return absl::UnavailableError(
          absl::StrCat("etcd at ", endpoint, " ", path, ": ", answer["error"].dump()));
    }
    return answer;
  }
  std::string message = answer.is_object() ? answer.value("message", answer.value("error", ""))
                                           : res->body.substr(0, 300);
  std::string text =
      absl::StrCat("etcd at ", endpoint, " answered ", path, " with ", res->status, ": ", message);
  if (res->status >= 500) {
    return absl::UnavailableError(
        absl::StrCat(text, " (is a quorum of etcd members up? `etcdctl endpoint health`)"));
  }
  if (res->status == 404) return absl::NotFoundError(text);
  return absl::InvalidArgumentError(text);
}

absl::StatusOr<json> EtcdClient::Call(absl::string_view path, const json& body,
                                      absl::Duration timeout) const {
  if (timeout == absl::ZeroDuration()) timeout = options_.timeout;
  const std::string text = body.dump();
  size_t start;
  {
    absl::MutexLock lock(&mu_);
    start = current_;
  }
  std::vector<std::string> failures;
  for (size_t n = 0; n < options_.endpoints.size(); ++n) {
    size_t index = (start + n) % options_.endpoints.size();
    const std::string& endpoint = options_.endpoints[index];
    std::unique_ptr<httplib::Client> client;
    {
      absl::MutexLock lock(&mu_);
      if (!idle_[index].empty()) {
        client = std::move(idle_[index].back());
        idle_[index].pop_back();
      }
    }
    if (!client) client = NewClient(endpoint);
    bool try_next = false;
    absl::StatusOr<json> answer = CallOnce(*client, endpoint, path, text, timeout, &try_next);
    if (!try_next) {
      absl::MutexLock lock(&mu_);
      if (answer.ok()) current_ = index;
      if (answer.ok() && idle_[index].size() < kMaxIdlePerEndpoint) {
        idle_[index].push_back(std::move(client));
      }
      return answer;
    }
    failures.push_back(std::string(answer.status().message()));
  }
  return absl::UnavailableError(
      absl::StrCat("no etcd endpoint answered: ", absl::StrJoin(failures, "; ")));
}

absl::StatusOr<int64_t> EtcdClient::LeaseGrant(absl::Duration ttl) const {
  ASSIGN_OR_RETURN(json answer,
                   Call("/v3/lease/grant", {{"TTL", std::to_string(absl::ToInt64Seconds(ttl))}}));
  int64_t id = JsonInt(answer, "ID");
  if (id == 0)
    return absl::UnavailableError(absl::StrCat("etcd granted no lease: ", answer.dump()));
  return id;
}

absl::StatusOr<absl::Duration> EtcdClient::LeaseKeepAlive(int64_t lease) const {
  ASSIGN_OR_RETURN(json answer, Call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}}));
  int64_t ttl = JsonInt(answer.value("result", json::object()), "TTL");
  if (ttl <= 0) return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
  return absl::Seconds(ttl);
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease) const {
  return Call("/v3/lease/revoke", {{"ID", std::to_string(lease)}}).status();
}

absl::StatusOr<LeaderKey> EtcdClient::Campaign(const std::string& name, int64_t lease,
                                               absl::string_view value,
                                               absl::Duration timeout) const {
  const std::string body = json{
      {"name", Base64Encode(name)},
      {"lease", std::to_string(lease)},
      {"value",
       Base64Encode(value)}}.dump();
  std::vector<std::string> failures;
  size_t start;
  {
    absl::MutexLock lock(&mu_);
    start = current_;
  }
  for (size_t n = 0; n < options_.endpoints.size(); ++n) {
    size_t index = (start + n) % options_.endpoints.size();
    const std::string& endpoint = options_.endpoints[index];
    std::unique_ptr<httplib::Client> client = NewClient(endpoint);
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return absl::CancelledError("the campaign was cancelled (shutdown)");
      campaigns_.push_back(client.get());
    }
    bool try_next = false;
    absl::StatusOr<json> answer =
        CallOnce(*client, endpoint, "/v3/election/campaign", body, timeout, &try_next);
    {
      absl::MutexLock lock(&mu_);
      campaigns_.erase(std::find(campaigns_.begin(), campaigns_.end(), client.get()));
      if (cancelled_) return absl::CancelledError("the campaign was cancelled (shutdown)");
    }
    if (!answer.ok()) {
      if (!try_next) return answer.status();
      failures.push_back(std::string(answer.status().message()));
      continue;
    }
    const json& leader = answer->value("leader", json::object());
    LeaderKey key;
    key.name = name;
    ASSIGN_OR_RETURN(key.key, Base64Decode(leader.value("key", "")));
    key.revision = JsonInt(leader, "rev");
    key.lease = JsonInt(leader, "lease");
    if (key.key.empty() || key.revision == 0) {
      return absl::UnavailableError(
          absl::StrCat("etcd's campaign answer has no leader key: ", answer->dump()));
    }
    return key;
  }
  return absl::UnavailableError(
      absl::StrCat("no etcd endpoint took the campaign: ", absl::StrJoin(failures, "; ")));
}

absl::StatusOr<std::optional<std::string>> EtcdClient::Leader(const std::string& name) const {
  absl::StatusOr<json> answer = Call("/v3/election/leader", {{"name", Base64Encode(name)}});
  if (absl::IsNotFound(answer.status())) return std::nullopt;  // "election: no leader"
  RETURN_IF_ERROR(answer.status());
  if (!answer->contains("kv")) return std::nullopt;
  ASSIGN_OR_RETURN(std::string value, Base64Decode((*answer)["kv"].value("value", "")));
  return value;
}

absl::Status EtcdClient::Resign(const LeaderKey& leader) const {
  return Call("/v3/election/resign", {{"leader",
                                       {{"name", Base64Encode(leader.name)},
                                        {"key", Base64Encode(leader.key)},
                                        {"rev", std::to_string(leader.revision)},
                                        {"lease", std::to_string(leader.lease)}}}})
      .status();
}

void EtcdClient::CancelCampaigns() const {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (httplib::Client* c : campaigns_) c->stop();
}

}  // namespace moat::controller
