// Time limits per language profile (the OpenSandbox article, sections 4.4 and 5.3): each
// language has a base wall-clock and CPU-time limit (config `languages:`), and cpu / wall is the
// profile's ratio cap (60 s wall, 15 s CPU lets a run wait on the network but not spin). A
// request may declare its expected duration, up to max_declared_duration (5 min): its wall limit
// becomes 1.25 x the declaration (never below the base, never above the maximum) and its CPU
// limit keeps the ratio. Declared and actual figures are recorded per tenant; a tenant whose
// recent runs keep outlasting their declarations gets half the base limits by default until
// its record improves.
//
// Records live in the store under runs/<tenant> (the last kKept runs, JSON), so every replica
// and a restart see the same history. Thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/store/store.h"
#include "util/clock.h"

namespace moat::controller {

// A language's base limits (controller/tenants/limits.h): a run's wall-clock limit, and its CPU
// time limit; cpu / wall caps the share of a core the run may use on average.
struct LanguageProfileConfig {
  std::string name;
  absl::Duration wall = absl::Seconds(60);
  absl::Duration cpu = absl::Seconds(15);
};

struct RunLimits {
  std::string language;
  absl::Duration wall, cpu;
  bool lowered = false;  // The tenant's record halved the defaults.
};

struct RunRecord {
  std::string language;
  absl::Duration declared;   // Zero: none declared.
  absl::Duration wall, cpu;  // What the run took.
  absl::Time at;
};

// The profiles the config names, or python, javascript and shell at 60 s wall, 15 s CPU.
std::vector<LanguageProfileConfig> LanguagesOrDefaults(
    const std::vector<LanguageProfileConfig>& configured);

class RunLimiter {
 public:
  static constexpr int kKept = 20;           // Runs kept per tenant.
  static constexpr int kJudged = 10;         // Recent declared runs judged.
  static constexpr int kUnderestimates = 3;  // At least this many, and half of those judged,
                                             // outlasted their declaration: lower defaults.
  static constexpr double kGrace = 1.25;     // The wall limit over a declaration.
  static constexpr double kLoweredFactor = 0.5;

  RunLimiter(std::vector<LanguageProfileConfig> languages, absl::Duration max_declared,
             Store* store, const Clock* clock)
      : languages_(LanguagesOrDefaults(languages)),
        max_declared_(max_declared),
        store_(store),
        clock_(clock) {}

  // InvalidArgument for an unknown language or a declaration not in (0, max_declared].
  absl::StatusOr<RunLimits> LimitsFor(const std::string& tenant, absl::string_view language,
                                      std::optional<absl::Duration> declared);
  // Records a finished run (durably; Unavailable if the store failed).
  absl::Status Record(const std::string& tenant, RunRecord run);
  absl::StatusOr<std::vector<RunRecord>> History(const std::string& tenant);

 private:
  absl::StatusOr<std::vector<RunRecord>> HistoryLocked(const std::string& tenant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<LanguageProfileConfig> languages_;
  const absl::Duration max_declared_;
  Store* store_;
  const Clock* clock_;
  absl::Mutex mu_;
  std::map<std::string, std::vector<RunRecord>> history_ ABSL_GUARDED_BY(mu_);  // Loaded ones.
};

}  // namespace moat::controller
