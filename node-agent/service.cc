#include "node-agent/service.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/log.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::agent {
namespace {

std::string ProfileNames(const AgentConfig& config) {
  return absl::StrJoin(config.profiles, ", ",
                       [](std::string* out, const ProfileConfig& p) { out->append(p.name); });
}

// Zero fields of `requested` take the profile's; the result may not exceed the profile's.
absl::StatusOr<Limits> EffectiveLimits(const Limits& requested, const ProfileConfig& profile) {
  Limits out = requested;
  const Limits& max = profile.limits;
  if (out.cpus == 0) out.cpus = max.cpus;
  if (out.memory_bytes == 0) out.memory_bytes = max.memory_bytes;
  if (out.pids == 0) out.pids = max.pids;
  if (out.workspace_bytes == 0) out.workspace_bytes = max.workspace_bytes;
  if (!WithinLimits(out, max)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the requested limits exceed profile \"", profile.name,
                     "\"'s; ask for at most its limits or use another profile"));
  }
  return out;
}

WarmPoolOptions PoolOptions(const AgentConfig& config) {
  WarmPoolOptions options;
  options.refill_concurrency = config.pool_refill_concurrency;
  return options;
}

}  // namespace

SandboxService::SandboxService(const AgentConfig* config, SandboxBackend* backend,
                               Registry* registry, AgentMetrics* metrics, const Clock* clock)
    : config_(config),
      backend_(backend),
      registry_(registry),
      metrics_(metrics),
      clock_(clock),
      recycle_queue_(config->recycle_per_second,
                     [this](const std::string& id) { Recycle(id).IgnoreError(); }),
      pool_(backend, clock, config->profiles, PoolOptions(*config),
            [this](const std::string& id) { recycle_queue_.Enqueue(id); }) {}

absl::StatusOr<SandboxRecord> SandboxService::Create(const CreateRequest& request) {
  const ProfileConfig* profile = config_->FindProfile(request.profile);
  if (profile == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown profile \"", request.profile,
                                                   "\"; this node has: ", ProfileNames(*config_)));
  }
  absl::Duration ttl = request.ttl.value_or(config_->default_ttl);
  if (ttl < absl::Seconds(1) || ttl > config_->max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl_seconds must be from 1 to ", absl::ToInt64Seconds(config_->max_ttl)));
  }
  ASSIGN_OR_RETURN(Limits limits, EffectiveLimits(request.limits, *profile));
  SandboxRecord record;
  record.profile = profile->name;
  record.state = SandboxState::kCreating;
  record.expires_at = clock_->Now() + ttl;
  record.metadata = request.metadata;
  record.env = request.env;
  record.limits = limits;
  ASSIGN_OR_RETURN(record.token, NewToken());
  if (std::optional<absl::StatusOr<SandboxRecord>> warm =
          TakeWarm(request, *profile, limits, record)) {
    return *std::move(warm);
  }

  SandboxSpec spec;
  ASSIGN_OR_RETURN(spec.id, NewSandboxId());
  spec.profile = profile->name;
  spec.root_dir = profile->root_dir;
  spec.limits = limits;
  if (request.policy.has_value()) {
    spec.policy = *request.policy;
  } else {
    ASSIGN_OR_RETURN(spec.policy, ReadProfilePolicy(*profile));
  }
  record.id = spec.id;
  record.start_path = StartPath::kCold;
  RETURN_IF_ERROR(registry_->Insert(record));

  absl::Time start = clock_->Now();
  absl::StatusOr<CreatedSandbox> created = backend_->Create(spec);
  if (!created.ok()) {
    registry_->Remove(spec.id).IgnoreError();  // The backend has cleaned up what it made.
    return created.status();
  }
  metrics_->ObserveStart(created->path, clock_->Now() - start);
  RETURN_IF_ERROR(registry_->SetState(spec.id, SandboxState::kReady));
  Save(spec.id);
  LogInfo(absl::StrCat("created sandbox ", spec.id, " (profile ", profile->name, ", cold)"));
  return registry_->Get(spec.id);
}

// Warm only for the profile's defaults: a warm sandbox was made with the profile's policy and
// limits, and the backend has no call to change them afterwards. Tighter limits or another
// policy would need one; until then such requests are made cold.
std::optional<absl::StatusOr<SandboxRecord>> SandboxService::TakeWarm(const CreateRequest& request,
                                                                      const ProfileConfig& profile,
                                                                      const Limits& limits,
                                                                      SandboxRecord record) {
  if (request.policy.has_value() || !(limits == profile.limits)) return std::nullopt;
  absl::Time start = clock_->Now();
  std::optional<std::string> id = pool_.Take(profile.name);
  if (!id.has_value()) {
    metrics_->AddPoolMiss(profile.name);
    return std::nullopt;
  }
  record.id = *id;
  record.state = SandboxState::kReady;
  record.start_path = StartPath::kWarm;
  if (absl::Status inserted = registry_->Insert(record); !inserted.ok()) {
    // Cannot happen with random ids; if it does, the sandbox is not handed out twice.
    LogError(absl::StrCat("cannot register warm sandbox ", *id, ": ", inserted.ToString()));
    recycle_queue_.Enqueue(*id);
    return std::nullopt;
  }
  metrics_->ObserveStart(StartPath::kWarm, clock_->Now() - start);
  Save(*id);
  LogInfo(absl::StrCat("created sandbox ", *id, " (profile ", profile.name, ", warm)"));
  return registry_->Get(*id);
}

absl::StatusOr<SandboxRecord> SandboxService::Get(absl::string_view id) const {
  return registry_->Get(id);
}

std::vector<SandboxRecord> SandboxService::List() const { return registry_->List(); }

absl::StatusOr<CleanupReport> SandboxService::Delete(absl::string_view id) {
  RETURN_IF_ERROR(registry_->BeginRecycle(id).status());
  return Recycle(std::string(id));
}

absl::StatusOr<CleanupReport> SandboxService::Recycle(const std::string& id) {
  absl::Time start = clock_->Now();
  absl::StatusOr<CleanupReport> report = backend_->Destroy(id);
  if (!report.ok()) {
    registry_->SetState(id, SandboxState::kFailed).IgnoreError();
    LogError(absl::StrCat("cannot recycle sandbox ", id, ": ", report.status().ToString()));
    return report.status();
  }
  metrics_->ObserveRecycle(clock_->Now() - start);
  if (!report->clean()) {
    // docs/agent.md: a sandbox with residue stays, failed, so that it is seen and deleted again
    // once the residue is dealt with; dropping it would hide what it left on the node.
    registry_->SetState(id, SandboxState::kFailed).IgnoreError();
    LogWarning(absl::StrCat("sandbox ", id, " left residue, so it stays in state failed (delete ",
                            "it again once that is dealt with): ", report->ToString()));
    return report;
  }
  registry_->Remove(id).IgnoreError();
  if (store_ != nullptr) store_->Remove(id);
  LogInfo(absl::StrCat("recycled sandbox ", id, ": ", report->ToString()));
  if (on_recycled_) on_recycled_(id);
  return report;
}

void SandboxService::ReportViolation(absl::string_view id, absl::string_view kind,
                                     absl::string_view detail) {
  metrics_->AddViolation(kind);
  events_.Add(clock_->Now(), "violation", id, kind, detail);
  LogWarning(absl::StrCat("sandbox ", id, ": violation (", kind, "): ", detail));
  // In the words of `moat run`'s supervisor (sandbox/supervisor.cc).
  if (kind == "syscall") {
    PassOnViolation(id, "seccomp", absl::StrCat("blocked system call ", detail));
  } else if (kind != "memory") {
    PassOnViolation(id, std::string(kind), std::string(detail));
  }
}

void SandboxService::PassOnViolation(absl::string_view id, std::string kind, std::string detail) {
  absl::MutexLock lock(&on_violation_mu_);
  if (on_violation_) on_violation_(std::string(id), kind, detail);
}

void SandboxService::ReportLimit(absl::string_view id, absl::string_view type,
                                 absl::string_view resource, absl::string_view detail) {
  if (type == "killed") metrics_->AddViolation(resource);
  events_.Add(clock_->Now(), type, id, resource, detail);
  LogWarning(absl::StrCat("sandbox ", id, ": ", type, " (", resource, "): ", detail));
}

void SandboxService::ReportEgress(absl::string_view id, bool allowed, absl::string_view detail) {
  metrics_->AddEgressRequest();
  if (allowed) return;
  metrics_->AddEgressDenial();
  metrics_->AddViolation("egress");
  events_.Add(clock_->Now(), "violation", id, "egress", detail);
  PassOnViolation(id, "network", std::string(detail));  // as sandbox/egress words it
}

void SandboxService::ReportHeartbeatMissed(absl::string_view id) {
  metrics_->AddHeartbeatMiss();
  LogWarning(absl::StrCat("sandbox ", id, ": its probe missed a heartbeat"));
}

void SandboxService::ReportExited(absl::string_view id, absl::string_view detail) {
  events_.Add(clock_->Now(), "exited", id, "init", detail);
  LogWarning(absl::StrCat("sandbox ", id, " ended by itself (", detail, "); recycling it"));
  pool_.Drop(id);  // A warm one: out of the depth now, and replaced at once.
  registry_->SetState(id, SandboxState::kRecycling).IgnoreError();
  recycle_queue_.Enqueue(std::string(id));
}

void SandboxService::ReportCompromised(absl::string_view id, absl::string_view reason) {
  metrics_->AddCompromised();
  events_.Add(clock_->Now(), "compromised", id, "probe", reason);
  LogError(
      absl::StrCat("sandbox ", id, " is compromised (", reason, "): killing and recycling it"));
  // Now, not through the rate-limited queue. A user's sandbox then leaves the registry; a warm
  // one is not in it: the pool drops it (no longer counted in its depth) and makes another.
  pool_.Drop(id);
  registry_->SetState(id, SandboxState::kRecycling).IgnoreError();
  Recycle(std::string(id)).IgnoreError();
}

absl::StatusOr<SandboxRecord> SandboxService::Pause(absl::string_view id) {
  ASSIGN_OR_RETURN(SandboxRecord record, registry_->Get(id));
  if (record.state != SandboxState::kReady && record.state != SandboxState::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " is ",
                                                      StateName(record.state),
                                                      "; only a ready or running one can pause"));
  }
  RETURN_IF_ERROR(registry_->SetPaused(id, true));  // First: no new command starts meanwhile.
  if (absl::Status frozen = backend_->Pause(id); !frozen.ok()) {
    backend_->Resume(id).IgnoreError();
    registry_->SetPaused(id, false).IgnoreError();
    return frozen;
  }
  LogInfo(absl::StrCat("paused sandbox ", id));
  return registry_->Get(id);
}

absl::StatusOr<SandboxRecord> SandboxService::Resume(absl::string_view id) {
  ASSIGN_OR_RETURN(SandboxRecord record, registry_->Get(id));
  RETURN_IF_ERROR(backend_->Resume(id));
  RETURN_IF_ERROR(registry_->SetPaused(id, false));
  LogInfo(absl::StrCat("resumed sandbox ", id));
  return registry_->Get(id);
}

absl::StatusOr<absl::Time> SandboxService::Renew(absl::string_view id, absl::Time expires_at) {
  if (expires_at > clock_->Now() + config_->max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("the new expiry is more than ", absl::FormatDuration(config_->max_ttl),
                     " away (api.max_ttl); ask for less and renew again later"));
  }
  ASSIGN_OR_RETURN(absl::Time renewed, registry_->Renew(id, expires_at));
  Save(id);
  return renewed;
}

void SandboxService::Save(absl::string_view id) {
  if (store_ == nullptr) return;
  absl::StatusOr<SandboxRecord> record = registry_->Get(id);
  if (!record.ok()) return;
  // Not fatal: the sandbox works; it just would not outlive this agent.
  if (absl::Status saved = store_->Save(*record); !saved.ok()) {
    LogWarning(absl::StrCat("sandbox ", id, " will not outlive this agent: ", saved.message()));
  }
}

std::vector<AdoptedSandboxInfo> SandboxService::Readopt() {
  std::vector<AdoptedSandboxInfo> served;
  absl::StatusOr<std::vector<AdoptedSandboxInfo>> adopted = backend_->Adopt();
  if (!adopted.ok()) {
    LogError(absl::StrCat("re-adopting the sandboxes of the previous agent failed: ",
                          adopted.status().message()));
    return served;
  }
  for (AdoptedSandboxInfo& info : *adopted) {
    absl::StatusOr<SandboxRecord> record =
        store_ != nullptr ? store_->Load(info.id) : absl::NotFoundError("no store");
    std::string why;
    if (!record.ok()) {
      why = std::string(record.status().message());  // a warm one nobody took, or a record lost
    } else if (record->expires_at <= clock_->Now()) {
      why = "it expired while no agent ran";
    } else if (config_->FindProfile(record->profile) == nullptr) {
      why = absl::StrCat("its profile \"", record->profile, "\" is no longer configured");
    } else if (absl::Status restored = registry_->Restore(*record); !restored.ok()) {
      why = std::string(restored.message());
    }
    if (!why.empty()) {
      absl::StatusOr<CleanupReport> report = backend_->Destroy(info.id);
      if (store_ != nullptr) store_->Remove(info.id);
      LogInfo(absl::StrCat("sandbox ", info.id, " of the previous agent ended (", why,
                           "): ", report.ok() ? report->ToString() : report.status().ToString()));
      continue;
    }
    LogInfo(absl::StrCat("sandbox ", info.id, " is served again (", info.commands.size(),
                         " command(s) carried over)"));
    served.push_back(std::move(info));
  }
  // Records of sandboxes that were not taken over (their init ended): nothing to serve.
  if (store_ != nullptr) {
    for (const std::string& id : store_->Ids()) {
      if (std::none_of(served.begin(), served.end(),
                       [&](const AdoptedSandboxInfo& s) { return s.id == id; })) {
        store_->Remove(id);
      }
    }
  }
  return served;
}

int SandboxService::DeleteExpired() {
  std::vector<std::string> expired = registry_->TakeExpired();
  for (const std::string& id : expired) {
    LogInfo(absl::StrCat("sandbox ", id, " expired"));
    recycle_queue_.Enqueue(id);  // Recycle logs the outcome.
  }
  return static_cast<int>(expired.size());
}

absl::StatusOr<CleanupReport> SandboxService::CleanLeftovers() {
  ASSIGN_OR_RETURN(CleanupReport report, backend_->CleanLeftovers());
  LogInfo(absl::StrCat("cleaned what a previous agent left: ", report.ToString()));
  return report;
}

bool SandboxService::TokenMatches(absl::string_view id, absl::string_view token) const {
  return registry_->TokenMatches(id, token);
}

absl::Status SandboxService::Health() { return backend_->CheckNode(); }

std::string SandboxService::MetricsText() {
  metrics_->SetSandboxes(registry_->CountByState());
  metrics_->SetRecycleBacklog(recycle_queue_.backlog());
  metrics_->SetNodeUsage(backend_->Usage());
  for (const std::string& profile : pool_.Profiles()) {
    PoolStats stats = pool_.Stats(profile);
    metrics_->SetPoolDepth(profile, stats.depth);
    metrics_->SetPoolTarget(profile, stats.target);
  }
  return metrics_->Serialize();
}

}  // namespace moat::agent
