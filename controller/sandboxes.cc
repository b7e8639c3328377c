#include "controller/sandboxes.h"

#include <algorithm>
#include <set>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/log.h"
#include "nlohmann/json.hpp"
#include "util/token.h"
#include "util/status_macros.h"

namespace moat::controller {
namespace {

using nlohmann::json;

constexpr char kPrefix[] = "sandboxes/";

int64_t TimeToUnixMillis(absl::Time t) {
  return t == absl::InfiniteFuture() ? -1 : absl::ToUnixMillis(t);
}
absl::Time UnixMillisToTime(int64_t ms) {
  return ms < 0 ? absl::InfiniteFuture() : absl::FromUnixMillis(ms);
}

}  // namespace

std::string EncodeSandbox(const Sandbox& s) {
  json j = {{"id", s.id},
            {"tenant", s.tenant},
            {"image", s.image},
            {"profile", s.profile},
            {"arch", s.arch},
            {"entrypoint", s.entrypoint},
            {"env", s.env},
            {"metadata", s.metadata},
            {"cpu", s.resources.cpu},
            {"memory", s.resources.memory},
            {"pids", s.resources.pids},
            {"state", s.state},
            {"reason", s.reason},
            {"message", s.message},
            {"created_ms", TimeToUnixMillis(s.created_at)},
            {"transition_ms", TimeToUnixMillis(s.last_transition)},
            {"expires_ms", TimeToUnixMillis(s.expires_at)},
            {"node", s.node},
            {"agent_id", s.agent_id},
            {"agent_token", s.agent_token}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<Sandbox> DecodeSandbox(absl::string_view text) {
  try {
    json j = json::parse(text);
    Sandbox s;
    s.id = j.at("id").get<std::string>();
    s.tenant = j.at("tenant").get<std::string>();
    s.image = j.at("image").get<std::string>();
    s.profile = j.at("profile").get<std::string>();
    s.arch = j.at("arch").get<std::string>();
    s.entrypoint = j.at("entrypoint").get<std::vector<std::string>>();
    s.env = j.at("env").get<std::map<std::string, std::string>>();
    s.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
    s.resources = {j.at("cpu").get<double>(), j.at("memory").get<uint64_t>(),
                   j.at("pids").get<uint64_t>()};
    s.state = j.at("state").get<std::string>();
    s.reason = j.at("reason").get<std::string>();
    s.message = j.at("message").get<std::string>();
    s.created_at = UnixMillisToTime(j.at("created_ms").get<int64_t>());
    s.last_transition = UnixMillisToTime(j.at("transition_ms").get<int64_t>());
    s.expires_at = UnixMillisToTime(j.at("expires_ms").get<int64_t>());
    s.node = j.at("node").get<std::string>();
    s.agent_id = j.at("agent_id").get<std::string>();
    s.agent_token = j.at("agent_token").get<std::string>();
    return s;
  } catch (const json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("a sandbox record in the store is damaged: ", e.what()));
  }
}

SandboxManager::SandboxManager(Store* store, NodeTable* nodes, AgentClient* agents,
                               const scheduler::Scheduler* scheduler, ControllerMetrics* metrics,
                               const Clock* clock, SandboxManagerOptions options)
    : store_(store),
      nodes_(nodes),
      agents_(agents),
      scheduler_(scheduler),
      metrics_(metrics),
      clock_(clock),
      options_(options) {}

absl::Status SandboxManager::Load() {
  ASSIGN_OR_RETURN(std::vector<KeyValue> records, store_->List(kPrefix));
  absl::MutexLock lock(&mu_);
  for (const KeyValue& kv : records) {
    ASSIGN_OR_RETURN(Sandbox s, DecodeSandbox(kv.value));
    sandboxes_[s.id] = std::move(s);
  }
  return absl::OkStatus();
}

absl::Status SandboxManager::Reload() {
  ASSIGN_OR_RETURN(std::vector<KeyValue> records, store_->List(kPrefix));
  std::map<std::string, Sandbox> fresh;
  for (const KeyValue& kv : records) {
    ASSIGN_OR_RETURN(Sandbox s, DecodeSandbox(kv.value));
    fresh[s.id] = std::move(s);
  }
  absl::MutexLock lock(&mu_);
  for (auto& [id, s] : sandboxes_) {
    if (s.state == "Pending" && !fresh.contains(id)) fresh[id] = std::move(s);
  }
  sandboxes_ = std::move(fresh);
  return absl::OkStatus();
}

absl::Status SandboxManager::Persist(const Sandbox& s) {
  return store_->Commit(WriteBatch().Put(absl::StrCat(kPrefix, s.id), EncodeSandbox(s))).status();
}

absl::Status SandboxManager::Forget(const std::string& id) {
  return store_->Commit(WriteBatch().Delete(absl::StrCat(kPrefix, id))).status();
}

absl::Duration SandboxManager::AgentTtl(absl::Time expires_at) const {
  if (expires_at == absl::InfiniteFuture()) return options_.no_expiry_agent_ttl;
  return std::max(absl::Seconds(1), expires_at - clock_->Now() + options_.agent_ttl_slack);
}

void SandboxManager::SetPendingReason(const std::string& id, const std::string& message) {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return;
  it->second.reason = "UNSCHEDULABLE";
  it->second.message = message;
}

absl::Status SandboxManager::Place(Sandbox& s, absl::Time deadline) {
  scheduler::SandboxRequest request;
  request.tenant = s.tenant;
  request.profile = s.profile;
  request.arch = s.arch;
  request.resources = s.resources;
  const absl::Time start = clock_->Now();
  int attempts = 0;
  absl::Status last_agent_error;
  while (true) {
    uint64_t seed;
    {
      absl::MutexLock lock(&mu_);
      seed = rng_();
    }
    scheduler::SnapshotPtr snapshot = nodes_->Snapshot();
    absl::StatusOr<scheduler::Decision> decision = scheduler_->Schedule(*snapshot, request, seed);
    if (!decision.ok()) {
      // Agents failed and no other node fits: the agents' error, not a wait for capacity.
      if (!last_agent_error.ok()) return last_agent_error;
      SetPendingReason(s.id, std::string(decision.status().message()));
      if (absl::Now() >= deadline) return decision.status();
      absl::SleepFor(options_.retry_interval);
      continue;
    }
    // The snapshot may be stale: the reservation re-checks against live numbers.
    if (!nodes_->Reserve(decision->node, s.tenant, s.resources).ok()) continue;
    ++attempts;
    absl::StatusOr<AgentEndpoint> endpoint = nodes_->Endpoint(decision->node);
    absl::StatusOr<AgentSandbox> created = absl::UnavailableError("no endpoint");
    if (endpoint.ok()) {
      AgentCreate create{s.profile, s.env, {{kControllerIdKey, s.id}}, AgentTtl(s.expires_at)};
      created = agents_->Create(*endpoint, create);
    } else {
      created = endpoint.status();
    }
    if (!created.ok()) {
      nodes_->Release(decision->node, s.tenant, s.resources);
      LogWarning(absl::StrCat("sandbox ", s.id, ": node ", decision->node,
                              " failed the create: ", created.status().message()));
      last_agent_error = absl::UnavailableError(
          absl::StrCat("the agents failed to create the sandbox on ", attempts,
                       " node(s); the last said: ", created.status().message()));
      request.excluded_nodes.insert(decision->node);
      if (attempts > options_.retries) return last_agent_error;
      continue;
    }
    s.node = decision->node;
    s.agent_id = created->id;
    s.agent_token = created->token;
    metrics_->ObserveScheduling(clock_->Now() - start, attempts);
    return absl::OkStatus();
  }
}

absl::StatusOr<Sandbox> SandboxManager::Create(Sandbox spec) {
  const absl::Time start = clock_->Now();
  spec.state = "Pending";
  spec.created_at = spec.last_transition = start;
  {
    absl::MutexLock lock(&mu_);
    if (sandboxes_.contains(spec.id)) return absl::AlreadyExistsError("sandbox id in use");
    sandboxes_[spec.id] = spec;
    placing_.insert(spec.id);
  }
  absl::Status placed = Place(spec, absl::Now() + options_.create_timeout);
  return Settle(std::move(spec), placed, start);
}

absl::StatusOr<Sandbox> SandboxManager::Settle(Sandbox s, absl::Status placed, absl::Time start) {
  if (placed.ok()) {
    s.state = "Running";
    s.reason.clear();
    s.message.clear();
    s.last_transition = clock_->Now();
    // The one durable write of a create: the sandbox is acknowledged only once it is stored.
    placed = Persist(s);
    if (!placed.ok()) {
      // Not acknowledged: nothing may be left behind on the agent either.
      if (auto endpoint = nodes_->Endpoint(s.node); endpoint.ok()) {
        (void)agents_->Delete(*endpoint, s.agent_id);
      }
      nodes_->Release(s.node, s.tenant, s.resources);
    }
  } else if (absl::IsResourceExhausted(placed)) {
    // No node fits now: the sandbox waits, Pending, with the reason; stored, since the create
    // answers (acknowledges) it.
    s.reason = "UNSCHEDULABLE";
    s.message = std::string(placed.message());
    if (absl::Status st = Persist(s); !st.ok()) {
      placed = st;
    } else {
      placed = absl::OkStatus();
    }
  }
  absl::MutexLock lock(&mu_);
  placing_.erase(s.id);
  if (!placed.ok()) {
    sandboxes_.erase(s.id);
    return placed;
  }
  if (s.state == "Running") metrics_->ObserveCreateToReady(/*warm=*/false, clock_->Now() - start);
  auto it = sandboxes_.find(s.id);
  if (it == sandboxes_.end()) return absl::NotFoundError("the sandbox was deleted meanwhile");
  // Keep changes made while placing (metadata patches).
  s.metadata = it->second.metadata;
  it->second = s;
  return s;
}

void SandboxManager::RetryPending() {
  std::vector<Sandbox> waiting;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sandboxes_) {
      if (s.state == "Pending" && !placing_.contains(id)) {
        placing_.insert(id);
        waiting.push_back(s);
      }
    }
  }
  for (Sandbox& s : waiting) {
    absl::Status placed = Place(s, absl::Now());
    absl::StatusOr<Sandbox> settled = Settle(s, placed, s.created_at);
    if (!settled.ok()) {
      LogWarning(absl::StrCat("placing pending sandbox ", s.id, ": ", settled.status().message()));
      // The agents failed: it stays Pending for the next round.
      absl::MutexLock lock(&mu_);
      sandboxes_.emplace(s.id, s);
    }
  }
}

void SandboxManager::StartPlacer(absl::Duration interval) {
  placer_ = std::thread([this, interval] {
    while (!stop_placer_.WaitForNotificationWithTimeout(interval)) RetryPending();
  });
}

void SandboxManager::StopPlacer() {
  if (!placer_.joinable()) return;
  if (!stop_placer_.HasBeenNotified()) stop_placer_.Notify();
  placer_.join();
}

SandboxManager::~SandboxManager() { StopPlacer(); }

absl::StatusOr<Sandbox> SandboxManager::Get(const std::string& tenant,
                                            const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second.tenant != tenant) {
    return absl::NotFoundError(absl::StrCat("no sandbox \"", id, "\""));
  }
  return it->second;
}

absl::StatusOr<Sandbox> SandboxManager::GetForToken(const std::string& id,
                                                    absl::string_view token) const {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second.agent_token.empty() ||
      !ConstantTimeEquals(token, it->second.agent_token)) {
    return absl::NotFoundError(absl::StrCat("no sandbox \"", id, "\" with this token"));
  }
  return it->second;
}

std::vector<Sandbox> SandboxManager::List(const std::string& tenant) const {
  std::vector<Sandbox> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sandboxes_) {
      if (s.tenant == tenant) out.push_back(s);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Sandbox& a, const Sandbox& b) {
    return a.created_at != b.created_at ? a.created_at > b.created_at : a.id < b.id;
  });
  return out;
}

absl::Status SandboxManager::Delete(const std::string& tenant, const std::string& id) {
  ASSIGN_OR_RETURN(Sandbox s, Get(tenant, id));
  if (s.state == "Pending") {
    return absl::FailedPreconditionError(
        "the sandbox is still being placed; delete it once "
        "its create has answered");
  }
  if (s.state == "Running" && !s.node.empty()) {
    absl::StatusOr<AgentEndpoint> endpoint = nodes_->Endpoint(s.node);
    if (endpoint.ok()) {
      absl::Status deleted = agents_->Delete(*endpoint, s.agent_id);
      if (!deleted.ok() && !absl::IsNotFound(deleted)) return deleted;
    }
    nodes_->Release(s.node, s.tenant, s.resources);
  }
  RETURN_IF_ERROR(Forget(id));
  absl::MutexLock lock(&mu_);
  sandboxes_.erase(id);
  return absl::OkStatus();
}

absl::StatusOr<absl::Time> SandboxManager::Renew(const std::string& tenant, const std::string& id,
                                                 absl::Time expires_at) {
  ASSIGN_OR_RETURN(Sandbox s, Get(tenant, id));
  if (s.expires_at == absl::InfiniteFuture()) {
    return absl::FailedPreconditionError(
        "the sandbox has no expiry (created with timeout null); there is nothing to renew");
  }
  if (expires_at <= clock_->Now()) {
    return absl::InvalidArgumentError("expiresAt must be in the future");
  }
  if (s.state != "Running") {
    return absl::FailedPreconditionError(absl::StrCat("the sandbox is ", s.state));
  }
  ASSIGN_OR_RETURN(AgentEndpoint endpoint, nodes_->Endpoint(s.node));
  RETURN_IF_ERROR(agents_->Renew(endpoint, s.agent_id, AgentTtl(expires_at)));
  s.expires_at = expires_at;
  RETURN_IF_ERROR(Persist(s));
  absl::MutexLock lock(&mu_);
  if (auto it = sandboxes_.find(id); it != sandboxes_.end()) it->second.expires_at = expires_at;
  return expires_at;
}

absl::StatusOr<Sandbox> SandboxManager::PatchMetadata(
    const std::string& tenant, const std::string& id,
    const std::map<std::string, std::optional<std::string>>& patch) {
  ASSIGN_OR_RETURN(Sandbox s, Get(tenant, id));
  for (const auto& [key, value] : patch) {
    if (value.has_value()) {
      s.metadata[key] = *value;
    } else {
      s.metadata.erase(key);
    }
  }
  RETURN_IF_ERROR(Persist(s));
  absl::MutexLock lock(&mu_);
  if (auto it = sandboxes_.find(id); it != sandboxes_.end()) it->second.metadata = s.metadata;
  return s;
}

void SandboxManager::NodeLost(const std::string& node) {
  std::vector<Sandbox> failed;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, s] : sandboxes_) {
      if (s.node != node || s.state != "Running") continue;
      s.state = "Failed";
      s.reason = "NODE_LOST";
      s.message = absl::StrCat("node \"", node, "\" stopped sending heartbeats");
      s.last_transition = clock_->Now();
      failed.push_back(s);
    }
  }
  for (const Sandbox& s : failed) {
    if (absl::Status st = Persist(s); !st.ok()) LogError(st.message());
  }
  if (!failed.empty()) {
    LogWarning(absl::StrCat("node ", node, " lost: ", failed.size(), " sandbox(es) Failed"));
  }
}

absl::Status SandboxManager::Reconcile(const std::string& node) {
  ASSIGN_OR_RETURN(AgentEndpoint endpoint, nodes_->Endpoint(node));
  ASSIGN_OR_RETURN(std::vector<AgentSandbox> running, agents_->List(endpoint));
  std::set<std::string> on_agent;
  std::vector<std::string> orphans;
  std::vector<Sandbox> missing;
  {
    absl::MutexLock lock(&mu_);
    for (const AgentSandbox& a : running) {
      auto id = a.metadata.find(kControllerIdKey);
      if (id == a.metadata.end()) continue;  // Not made by a controller: not ours to judge.
      auto it = sandboxes_.find(id->second);
      // A Pending sandbox may be in its agent create right now: not an orphan.
      if (it == sandboxes_.end() ||
          (it->second.state != "Pending" && it->second.agent_id != a.id)) {
        orphans.push_back(a.id);
      } else {
        on_agent.insert(a.id);
      }
    }
    for (auto& [id, s] : sandboxes_) {
      if (s.node == node && s.state == "Running" && !on_agent.contains(s.agent_id)) {
        s.state = "Failed";
        s.reason = "SANDBOX_MISSING";
        s.message = absl::StrCat("node \"", node, "\" no longer runs the sandbox");
        s.last_transition = clock_->Now();
        missing.push_back(s);
      }
    }
  }
  for (const std::string& id : orphans) {
    LogInfo(absl::StrCat("node ", node, ": deleting orphan sandbox ", id));
    (void)agents_->Delete(endpoint, id);
  }
  for (const Sandbox& s : missing) {
    nodes_->Release(s.node, s.tenant, s.resources);
    RETURN_IF_ERROR(Persist(s));
  }
  return absl::OkStatus();
}

void SandboxManager::Tick() {
  std::vector<Sandbox> expired;
  std::map<std::string, int> by_state;
  int pending = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = clock_->Now();
    for (const auto& [id, s] : sandboxes_) {
      ++by_state[s.state];
      if (s.state == "Pending") ++pending;
      if (s.state != "Pending" && s.expires_at <= now) expired.push_back(s);
    }
  }
  metrics_->SetSandboxes(by_state);
  metrics_->SetPending(pending);
  for (const Sandbox& s : expired) {
    absl::Status st = Delete(s.tenant, s.id);
    if (!st.ok()) LogWarning(absl::StrCat("expiring sandbox ", s.id, ": ", st.message()));
  }
}

int SandboxManager::Pending() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, s] : sandboxes_) n += s.state == "Pending";
  return n;
}

}  // namespace moat::controller
