#include "controller/tenants/run_limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "util/quote.h"
#include "util/status_macros.h"

namespace moat::controller {
namespace {

using nlohmann::json;
constexpr char kPrefix[] = "runs/";

}  // namespace

std::vector<LanguageProfileConfig> LanguagesOrDefaults(
    const std::vector<LanguageProfileConfig>& configured) {
  if (!configured.empty()) return configured;
  std::vector<LanguageProfileConfig> out;
  for (const char* name : {"python", "javascript", "shell"}) {
    out.push_back({name, absl::Seconds(60), absl::Seconds(15)});
  }
  return out;
}

absl::StatusOr<RunLimits> RunLimiter::LimitsFor(const std::string& tenant,
                                                absl::string_view language,
                                                std::optional<absl::Duration> declared) {
  auto it = std::find_if(languages_.begin(), languages_.end(),
                         [&](const LanguageProfileConfig& l) { return l.name == language; });
  if (it == languages_.end()) {
    std::vector<std::string> names;
    for (const auto& l : languages_) names.push_back(l.name);
    return absl::InvalidArgumentError(absl::StrCat("unknown language ", QuoteForMessage(language),
                                                   "; the config's languages are ",
                                                   absl::StrJoin(names, ", ")));
  }
  const double ratio = absl::FDivDuration(it->cpu, it->wall);
  RunLimits limits{it->name, it->wall, it->cpu};
  if (declared.has_value()) {
    if (*declared <= absl::ZeroDuration() || *declared > max_declared_) {
      return absl::InvalidArgumentError(
          absl::StrCat("the expected duration must be more than 0 and at most ",
                       absl::FormatDuration(max_declared_),
                       " (max_declared_duration); split longer work into several runs"));
    }
    limits.wall = std::clamp(*declared * kGrace, it->wall, std::max(it->wall, max_declared_));
    limits.cpu = limits.wall * ratio;
    return limits;
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<RunRecord> runs, HistoryLocked(tenant));
  int judged = 0, under = 0;
  for (auto r = runs.rbegin(); r != runs.rend() && judged < kJudged; ++r) {
    if (r->declared <= absl::ZeroDuration()) continue;
    ++judged;
    under += r->wall > r->declared;
  }
  if (under >= kUnderestimates && 2 * under >= judged) {
    limits.wall = limits.wall * kLoweredFactor;
    limits.cpu = limits.cpu * kLoweredFactor;
    limits.lowered = true;
  }
  return limits;
}

absl::StatusOr<std::vector<RunRecord>> RunLimiter::HistoryLocked(const std::string& tenant) {
  if (auto it = history_.find(tenant); it != history_.end()) return it->second;
  ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store_->Get(absl::StrCat(kPrefix, tenant)));
  std::vector<RunRecord> runs;
  if (kv.has_value()) {
    json j = json::parse(kv->value, nullptr, false);
    if (!j.is_array()) return absl::DataLossError("a run record in the store is damaged");
    for (const json& r : j) {
      runs.push_back({r.value("language", ""), absl::Milliseconds(r.value("declared_ms", 0)),
                      absl::Milliseconds(r.value("wall_ms", 0)),
                      absl::Milliseconds(r.value("cpu_ms", 0)),
                      absl::FromUnixMillis(r.value("at_ms", int64_t{0}))});
    }
  }
  history_[tenant] = runs;
  return runs;
}

absl::Status RunLimiter::Record(const std::string& tenant, RunRecord run) {
  if (run.at == absl::Time()) run.at = clock_->Now();
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<RunRecord> runs, HistoryLocked(tenant));
  runs.push_back(run);
  if (runs.size() > kKept) runs.erase(runs.begin(), runs.end() - kKept);
  json j = json::array();
  for (const RunRecord& r : runs) {
    j.push_back({{"language", r.language},
                 {"declared_ms", absl::ToInt64Milliseconds(r.declared)},
                 {"wall_ms", absl::ToInt64Milliseconds(r.wall)},
                 {"cpu_ms", absl::ToInt64Milliseconds(r.cpu)},
                 {"at_ms", absl::ToUnixMillis(r.at)}});
  }
  RETURN_IF_ERROR(
      store_->Commit(WriteBatch().Put(absl::StrCat(kPrefix, tenant), j.dump())).status());
  history_[tenant] = std::move(runs);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RunRecord>> RunLimiter::History(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  return HistoryLocked(tenant);
}

}  // namespace moat::controller
