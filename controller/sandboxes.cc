#include "controller/sandboxes.h"

#include <algorithm>
#include <set>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "controller/lifecycle_json.h"
#include "nlohmann/json.hpp"
#include "util/log.h"
#include "util/quote.h"
#include "util/shell_command.h"
#include "util/status_macros.h"
#include "util/token.h"

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

bool OnNode(const Sandbox& s) {
  return s.state == "Running" || s.state == "Pausing" || s.state == "Paused" ||
         s.state == "Resuming";
}

// What counts against a tenant's quota: every sandbox that is waiting for a node or holds one
// (a paused sandbox keeps its memory and its reservation).
void CountAgainstQuota(const Sandbox& s, TenantUsage* usage) {
  if (s.state != "Pending" && !OnNode(s)) return;
  ++usage->sandboxes;
  usage->cpu += s.resources.cpu;
  usage->memory += s.resources.memory;
}

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
            {"limit_cpus", s.limit_cpus},
            {"limit_memory", s.limit_memory},
            {"egress_allow", s.egress_allow},
            {"egress_deny", s.egress_deny},
            {"state", s.state},
            {"reason", s.reason},
            {"message", s.message},
            {"created_ms", TimeToUnixMillis(s.created_at)},
            {"transition_ms", TimeToUnixMillis(s.last_transition)},
            {"expires_ms", TimeToUnixMillis(s.expires_at)},
            {"node", s.node},
            {"agent_id", s.agent_id},
            {"agent_token", s.agent_token},
            {"entrypoint_command", s.entrypoint_command}};
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
    // Absent in records of controllers before resourceLimits and networkPolicy reached agents.
    s.limit_cpus = j.value("limit_cpus", 0.0);
    s.limit_memory = j.value("limit_memory", uint64_t{0});
    s.egress_allow = j.value("egress_allow", std::vector<std::string>{});
    s.egress_deny = j.value("egress_deny", std::vector<std::string>{});
    s.state = j.at("state").get<std::string>();
    s.reason = j.at("reason").get<std::string>();
    s.message = j.at("message").get<std::string>();
    s.created_at = UnixMillisToTime(j.at("created_ms").get<int64_t>());
    s.last_transition = UnixMillisToTime(j.at("transition_ms").get<int64_t>());
    s.expires_at = UnixMillisToTime(j.at("expires_ms").get<int64_t>());
    s.node = j.at("node").get<std::string>();
    s.agent_id = j.at("agent_id").get<std::string>();
    s.agent_token = j.at("agent_token").get<std::string>();
    // Absent in records of controllers before entrypoints were started.
    s.entrypoint_command = j.value("entrypoint_command", "");
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
  if (s.ephemeral) return absl::OkStatus();
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

AgentCreate SandboxManager::AgentRequest(const Sandbox& s, const std::string& node,
                                         const std::string& attempt) const {
  AgentCreate create{
      s.profile, s.env, {{kControllerIdKey, s.id}, {kAttemptKey, attempt}}, AgentTtl(s.expires_at)};
  // Limits only when tighter than the profile's: the agent refuses looser ones (a profile is
  // the most its sandboxes get), and a request at the profile's limits keeps the warm pool.
  scheduler::Resources profile;
  if (std::optional<NodeView> view = nodes_->Get(node); view.has_value()) {
    if (auto it = view->report.profile_limits.find(s.profile);
        it != view->report.profile_limits.end()) {
      profile = it->second;
    }
  }
  if (s.limit_cpus > 0 && (profile.cpu == 0 || s.limit_cpus < profile.cpu)) {
    create.cpus = s.limit_cpus;
  }
  if (s.limit_memory > 0 && (profile.memory == 0 || s.limit_memory < profile.memory)) {
    create.memory_bytes = s.limit_memory;
  }
  // Started by the agent in this call; POST /v1/run's sandboxes run their command instead.
  if (!s.ephemeral) create.entrypoint = s.entrypoint;
  if (!s.egress_allow.empty() || !s.egress_deny.empty()) {
    nlohmann::json network = nlohmann::json::object();
    if (!s.egress_allow.empty()) network["allowedDomains"] = s.egress_allow;
    if (!s.egress_deny.empty()) network["deniedDomains"] = s.egress_deny;
    create.policy = {{"network", network}};
  }
  return create;
}

absl::Status SandboxManager::Place(Sandbox& s, absl::Time deadline, bool& warm) {
  scheduler::SandboxRequest request;
  request.tenant = s.tenant;
  request.profile = s.profile;
  request.arch = s.arch;
  request.resources = s.resources;
  const absl::Time start = clock_->Now();
  int attempts = 0;
  absl::Status last_agent_error;
  while (true) {
    uint64_t seed, attempt;
    {
      absl::MutexLock lock(&mu_);
      seed = rng_();
      attempt = rng_();
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
      std::string tag = absl::StrCat(absl::Hex(attempt, absl::kZeroPad16));
      {
        // Before the agent has it: a Reconcile that sees this copy keeps it.
        absl::MutexLock lock(&mu_);
        attempts_[s.id] = tag;
      }
      created = agents_->Create(*endpoint, AgentRequest(s, decision->node, tag));
    } else {
      created = endpoint.status();
    }
    if (absl::IsInvalidArgument(created.status())) {
      // Its entrypoint cannot run: every node would refuse it alike. The agent kept nothing.
      nodes_->Release(decision->node, s.tenant, s.resources);
      return created.status();
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
    s.entrypoint_command = created->entrypoint_command;
    warm = created->start == "warm";
    metrics_->ObserveScheduling(clock_->Now() - start, attempts);
    return absl::OkStatus();
  }
}

absl::StatusOr<Sandbox> SandboxManager::Create(Sandbox spec, const TenantQuota& quota) {
  const absl::Time start = clock_->Now();
  spec.state = "Pending";
  spec.created_at = spec.last_transition = start;
  {
    absl::MutexLock lock(&mu_);
    if (sandboxes_.contains(spec.id)) return absl::AlreadyExistsError("sandbox id in use");
    // Under the lock with the insert below: two creates cannot both take the last of a quota.
    TenantUsage usage;
    for (const auto& [id, s] : sandboxes_) {
      if (s.tenant == spec.tenant) CountAgainstQuota(s, &usage);
    }
    RETURN_IF_ERROR(CheckQuota(spec.tenant, quota, usage, spec.resources));
    sandboxes_[spec.id] = spec;
    placing_.insert(spec.id);
  }
  bool warm = false;
  absl::Status placed = Place(spec, absl::Now() + options_.create_timeout, warm);
  return Settle(std::move(spec), placed, start, warm);
}

absl::StatusOr<Sandbox> SandboxManager::Settle(Sandbox s, absl::Status placed, absl::Time start,
                                               bool warm) {
  if (placed.ok()) {
    s.state = "Running";
    s.reason.clear();
    s.message.clear();
    s.last_transition = clock_->Now();
    placed = StartEntrypoint(s);
    // The one durable write of a create: the sandbox is acknowledged only once it is stored.
    if (placed.ok()) placed = Persist(s);
    if (!placed.ok()) {
      // Not acknowledged: nothing may be left behind on the agent either.
      if (auto endpoint = nodes_->Endpoint(s.node); endpoint.ok()) {
        (void)agents_->Delete(*endpoint, s.agent_id);
      }
      nodes_->Release(s.node, s.tenant, s.resources);
    }
  } else if (absl::IsResourceExhausted(placed) && !s.ephemeral) {
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
  attempts_.erase(s.id);
  if (!placed.ok()) {
    sandboxes_.erase(s.id);
    return placed;
  }
  if (s.state == "Running") metrics_->ObserveCreateToReady(warm, clock_->Now() - start);
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
    bool warm = false;
    absl::Status placed = Place(s, absl::Now(), warm);
    absl::StatusOr<Sandbox> settled = Settle(s, placed, s.created_at, warm);
    if (!settled.ok()) {
      LogWarning(absl::StrCat("placing pending sandbox ", s.id, ": ", settled.status().message()));
      if (absl::IsInvalidArgument(settled.status())) {
        // Its entrypoint cannot run: another round would fail alike. The create was
        // acknowledged (202), so its owner learns why on GET.
        s.state = "Failed";
        s.reason = "ENTRYPOINT_NOT_RUNNABLE";
        s.message = std::string(settled.status().message());
        s.last_transition = clock_->Now();
        if (absl::Status st = Persist(s); !st.ok()) LogError(st.message());
      }
      // Otherwise the agents failed: it stays Pending for the next round.
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

absl::Status SandboxManager::StartEntrypoint(Sandbox& s) {
  // Started by the agent in its create already (all but agents older than that field).
  if (s.ephemeral || s.entrypoint.empty() || !s.entrypoint_command.empty()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(AgentEndpoint endpoint, nodes_->Endpoint(s.node));
  // Whether the program can run is asked first, as the agent's create does.
  AgentCommand check;
  check.command = EntrypointCheckCommand(s.entrypoint[0]);
  check.env = s.env;
  check.timeout = absl::Seconds(10);
  absl::StatusOr<AgentCommandResult> checked =
      agents_->RunCommand(endpoint, s.agent_id, s.agent_token, check);
  if (!checked.ok()) {
    return absl::UnavailableError(
        absl::StrCat("checking the entrypoint on the agent: ", checked.status().message()));
  }
  if (checked->status == "exited" && checked->exit_code.value_or(-1) != 0) {
    return absl::InvalidArgumentError(EntrypointNotRunnableMessage(s.entrypoint[0]));
  }
  if (checked->status != "exited") {
    return absl::UnavailableError(
        absl::StrCat("checking the entrypoint on the agent: the check ended ", checked->status));
  }
  AgentCommand main;
  main.command = ExecCommand(s.entrypoint);
  main.env = s.env;
  absl::StatusOr<std::string> id = agents_->StartCommand(endpoint, s.agent_id, s.agent_token, main);
  if (!id.ok()) {
    return absl::UnavailableError(
        absl::StrCat("starting the entrypoint on the agent: ", id.status().message()));
  }
  s.entrypoint_command = *id;
  return absl::OkStatus();
}

void SandboxManager::WatchEntrypoints() {
  std::vector<Sandbox> due;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto it = entrypoint_checked_.begin(); it != entrypoint_checked_.end();) {
      it = sandboxes_.contains(it->first) ? std::next(it) : entrypoint_checked_.erase(it);
    }
    for (const auto& [id, s] : sandboxes_) {
      if (s.state != "Running" || s.entrypoint_command.empty()) continue;
      auto [checked, fresh] = entrypoint_checked_.try_emplace(id, now);
      // Looked at first one interval after it started (it started at most a create ago).
      if (fresh || now - checked->second < options_.entrypoint_check_interval) continue;
      checked->second = now;
      due.push_back(s);
    }
  }
  for (const Sandbox& s : due) {
    absl::StatusOr<AgentEndpoint> endpoint = nodes_->Endpoint(s.node);
    if (!endpoint.ok()) continue;  // Its node's fate decides (NotReady, Lost).
    absl::StatusOr<AgentCommandState> state =
        agents_->CommandState(*endpoint, s.agent_id, s.agent_token, s.entrypoint_command);
    if (!state.ok()) {
      // The agent did not answer, or no longer has the sandbox (Reconcile marks it missing).
      continue;
    }
    if (!state->running) EndWithEntrypoint(s, *state);
  }
}

void SandboxManager::EndWithEntrypoint(const Sandbox& ended, const AgentCommandState& state) {
  Sandbox s;
  {
    absl::MutexLock lock(&mu_);
    auto it = sandboxes_.find(ended.id);
    // Paused, deleted or ended otherwise meanwhile: not this watcher's to end.
    if (it == sandboxes_.end() || it->second.state != "Running" ||
        it->second.agent_id != ended.agent_id) {
      return;
    }
    const int code = state.exit_code.value_or(-1);
    if (code == 0) {
      // OpenSandbox's Docker server: a container whose command exited 0 is Terminated.
      it->second.state = "Terminated";
      it->second.reason = "CONTAINER_EXITED";
      it->second.message = "the entrypoint exited with code 0; the sandbox ended with it";
    } else {
      it->second.state = "Failed";
      it->second.reason = "CONTAINER_EXITED_ERROR";
      it->second.message =
          code > 128  ? absl::StrCat("the entrypoint was killed by signal ", code - 128,
                                     "; the sandbox ended with it")
          : code >= 0 ? absl::StrCat("the entrypoint exited with code ", code,
                                     "; the sandbox ended with it")
                      : absl::StrCat("the entrypoint ended (", state.status,
                                     state.error.empty() ? "" : absl::StrCat(": ", state.error),
                                     "); the sandbox ended with it");
    }
    it->second.last_transition = clock_->Now();
    s = it->second;
  }
  LogInfo(absl::StrCat("sandbox ", s.id, ": ", s.message));
  if (absl::StatusOr<AgentEndpoint> endpoint = nodes_->Endpoint(s.node); endpoint.ok()) {
    absl::Status deleted = agents_->Delete(*endpoint, s.agent_id);
    if (!deleted.ok() && !absl::IsNotFound(deleted)) {
      // Ended all the same: the reconciler deletes it when the node answers again.
      LogWarning(absl::StrCat("ending sandbox ", s.id, ": ", deleted.message()));
    }
  }
  nodes_->Release(s.node, s.tenant, s.resources);
  if (absl::Status st = Persist(s); !st.ok()) LogError(st.message());
}

absl::StatusOr<Sandbox> SandboxManager::Get(const std::string& tenant,
                                            const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second.tenant != tenant) {
    return absl::NotFoundError(absl::StrCat("no sandbox ", QuoteForMessage(id)));
  }
  return it->second;
}

absl::StatusOr<Sandbox> SandboxManager::GetForToken(const std::string& id,
                                                    absl::string_view token) const {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second.agent_token.empty() ||
      !ConstantTimeEquals(token, it->second.agent_token)) {
    return absl::NotFoundError(
        absl::StrCat("no sandbox ", QuoteForMessage(id), " with this token"));
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
    {
      absl::MutexLock lock(&mu_);
      if (placing_.contains(id)) {
        return absl::FailedPreconditionError(
            "the sandbox is being placed on a node right now; delete it again in a second");
      }
      placing_.insert(id);  // The placer leaves it alone while it is forgotten.
    }
    absl::Status forgotten = Forget(id);
    absl::MutexLock lock(&mu_);
    placing_.erase(id);
    if (forgotten.ok()) sandboxes_.erase(id);
    return forgotten;
  }
  if (OnNode(s) && !s.node.empty()) {
    absl::StatusOr<AgentEndpoint> endpoint = nodes_->Endpoint(s.node);
    if (endpoint.ok()) {
      absl::Status deleted = agents_->Delete(*endpoint, s.agent_id);
      if (!deleted.ok() && !absl::IsNotFound(deleted)) return deleted;
    }
    nodes_->Release(s.node, s.tenant, s.resources);
  }
  if (!s.ephemeral) RETURN_IF_ERROR(Forget(id));
  absl::MutexLock lock(&mu_);
  sandboxes_.erase(id);
  return absl::OkStatus();
}

absl::StatusOr<AgentCommandResult> SandboxManager::Run(Sandbox spec, const AgentCommand& command) {
  spec.ephemeral = true;
  ASSIGN_OR_RETURN(Sandbox s, Create(std::move(spec)));
  absl::StatusOr<AgentCommandResult> result = absl::UnavailableError("no endpoint");
  if (absl::StatusOr<AgentEndpoint> endpoint = nodes_->Endpoint(s.node); endpoint.ok()) {
    result = agents_->RunCommand(*endpoint, s.agent_id, s.agent_token, command);
  } else {
    result = endpoint.status();
  }
  if (absl::Status deleted = Delete(s.tenant, s.id); !deleted.ok()) {
    // The agent's own expiry (the run's timeout plus agent_ttl_slack) ends it all the same.
    LogWarning(absl::StrCat("run ", s.id, ": deleting its sandbox: ", deleted.message()));
  }
  return result;
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
  if (!OnNode(s)) {
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
      if (s.node != node || !OnNode(s)) continue;
      s.state = "Failed";
      s.reason = "NODE_LOST";
      s.message = absl::StrCat("node ", QuoteForMessage(node), " stopped sending heartbeats");
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
      // A Pending sandbox's copy from the agent create in flight here is not an orphan; one
      // from any other attempt is (a leader that died before storing it Running, or this
      // controller's failed attempt). A Failed one (its node lost or drained) has ended for its
      // owner: what still runs of it is.
      bool orphan = it == sandboxes_.end();
      if (!orphan && it->second.state == "Pending") {
        auto tag = a.metadata.find(kAttemptKey);
        auto attempt = attempts_.find(id->second);
        orphan =
            tag == a.metadata.end() || attempt == attempts_.end() || attempt->second != tag->second;
      } else if (!orphan) {
        orphan = it->second.agent_id != a.id || !OnNode(it->second);
      }
      if (orphan) {
        orphans.push_back(a.id);
      } else {
        on_agent.insert(a.id);
      }
    }
    for (auto& [id, s] : sandboxes_) {
      if (s.node == node && OnNode(s) && !on_agent.contains(s.agent_id)) {
        s.state = "Failed";
        s.reason = "SANDBOX_MISSING";
        s.message = absl::StrCat("node ", QuoteForMessage(node), " no longer runs the sandbox");
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
  WatchEntrypoints();
  std::vector<std::string> drained;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [node, deadline] : drain_deadlines_) {
      if (deadline <= clock_->Now()) drained.push_back(node);
    }
  }
  for (const std::string& node : drained) {
    // Uncordoned meanwhile: the drain was called off.
    std::optional<NodeView> view = nodes_->Get(node);
    if (view.has_value() && view->draining) {
      EndDrained(node);
    } else {
      absl::MutexLock lock(&mu_);
      drain_deadlines_.erase(node);
    }
  }
  for (const Sandbox& s : expired) {
    absl::Status st = Delete(s.tenant, s.id);
    if (!st.ok()) LogWarning(absl::StrCat("expiring sandbox ", s.id, ": ", st.message()));
  }
}

absl::StatusOr<Sandbox> SandboxManager::Pause(const std::string& tenant, const std::string& id) {
  return Freeze(tenant, id, /*pause=*/true);
}

absl::StatusOr<Sandbox> SandboxManager::Resume(const std::string& tenant, const std::string& id) {
  return Freeze(tenant, id, /*pause=*/false);
}

absl::StatusOr<Sandbox> SandboxManager::Freeze(const std::string& tenant, const std::string& id,
                                               bool pause) {
  const std::string from = pause ? "Running" : "Paused";
  const std::string during = pause ? "Pausing" : "Resuming";
  const std::string to = pause ? "Paused" : "Running";
  std::string node, agent_id;
  {
    absl::MutexLock lock(&mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end() || it->second.tenant != tenant) {
      return absl::NotFoundError(absl::StrCat("no sandbox ", QuoteForMessage(id)));
    }
    if (it->second.state != from) {
      return absl::FailedPreconditionError(absl::StrCat("the sandbox is ", it->second.state,
                                                        "; only a ", from, " sandbox can be ",
                                                        pause ? "paused" : "resumed"));
    }
    it->second.state = during;
    it->second.last_transition = clock_->Now();
    node = it->second.node;
    agent_id = it->second.agent_id;
  }
  absl::StatusOr<AgentEndpoint> endpoint = nodes_->Endpoint(node);
  absl::Status done = !endpoint.ok() ? endpoint.status()
                      : pause        ? agents_->Pause(*endpoint, agent_id)
                                     : agents_->Resume(*endpoint, agent_id);
  Sandbox result;
  {
    absl::MutexLock lock(&mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return absl::NotFoundError("the sandbox was deleted meanwhile");
    if (it->second.state != during) {
      return absl::AbortedError(
          absl::StrCat("the sandbox became ", it->second.state, " meanwhile"));
    }
    it->second.state = done.ok() ? to : from;
    it->second.last_transition = clock_->Now();
    result = it->second;
  }
  if (!done.ok()) {
    return absl::Status(done.code(), absl::StrCat("the sandbox is still ", from, ": ",
                                                  done.message(), "; try again"));
  }
  // Stored: after a restart a paused sandbox is still Paused (the agent keeps it frozen).
  RETURN_IF_ERROR(Persist(result));
  return result;
}

absl::StatusOr<DrainReport> SandboxManager::Drain(const std::string& node, absl::Duration grace) {
  RETURN_IF_ERROR(nodes_->SetDraining(node));
  DrainReport report;
  report.deadline = clock_->Now() + grace;
  {
    // Kept until the node is uncordoned: Tick also ends what lands there later (a create that
    // had reserved the node before the cordon).
    absl::MutexLock lock(&mu_);
    drain_deadlines_[node] = report.deadline;
  }
  if (grace <= absl::ZeroDuration()) {
    report.ended = EndDrained(node);
    return report;
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [id, s] : sandboxes_) report.remaining += s.node == node && OnNode(s);
  return report;
}

std::vector<std::string> SandboxManager::EndDrained(const std::string& node) {
  std::vector<Sandbox> ending;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, s] : sandboxes_) {
      if (s.node != node || !OnNode(s)) continue;
      s.state = "Failed";
      s.reason = "NODE_DRAINED";
      s.message = absl::StrCat("node ", QuoteForMessage(node),
                               " was drained; create the sandbox again (it goes to another node)");
      s.last_transition = clock_->Now();
      ending.push_back(s);
    }
  }
  std::vector<std::string> ids;
  absl::StatusOr<AgentEndpoint> endpoint = nodes_->Endpoint(node);
  for (const Sandbox& s : ending) {
    if (endpoint.ok()) {
      absl::Status deleted = agents_->Delete(*endpoint, s.agent_id);
      if (!deleted.ok() && !absl::IsNotFound(deleted)) {
        // Failed all the same: the reconciler deletes it when the node answers again.
        LogWarning(
            absl::StrCat("draining ", node, ": deleting sandbox ", s.id, ": ", deleted.message()));
      }
    }
    nodes_->Release(s.node, s.tenant, s.resources);
    if (absl::Status st = Persist(s); !st.ok()) LogError(st.message());
    ids.push_back(s.id);
  }
  if (!ids.empty()) {
    LogInfo(absl::StrCat("node ", node, " drained: ", ids.size(), " sandbox(es) ended"));
  }
  return ids;
}

std::map<std::string, TenantUsage> SandboxManager::UsageByTenant() const {
  std::map<std::string, TenantUsage> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, s] : sandboxes_) CountAgainstQuota(s, &out[s.tenant]);
  return out;
}

int SandboxManager::Pending() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, s] : sandboxes_) n += s.state == "Pending";
  return n;
}

}  // namespace moat::controller
