// The agent's table of sandboxes: who owns which, in what state, until when. Thread-safe; time
// comes from an injected Clock so TTL expiry is tested without sleeping.
//
// States (the backend's work happens on the arrows):
//
//   creating ──ok──▶ ready ◀──▶ running (a command is in flight)
//      │               │           │
//      └──failed       └──delete / expiry / compromised──▶ recycling ──▶ (removed)
//
// A record in `recycling` is no longer served (Get still shows it until it is removed).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node-agent/backend/backend.h"
#include "node-agent/config/limits.h"
#include "util/clock.h"

namespace moat::agent {

enum class SandboxState { kCreating, kReady, kRunning, kRecycling, kFailed };
inline constexpr SandboxState kAllStates[] = {SandboxState::kCreating, SandboxState::kReady,
                                              SandboxState::kRunning, SandboxState::kRecycling,
                                              SandboxState::kFailed};
absl::string_view StateName(SandboxState state);  // "creating", "ready", ...

struct SandboxRecord {
  std::string id;
  std::string profile;
  SandboxState state = SandboxState::kCreating;
  absl::Time created;
  absl::Time expires_at;
  absl::Time last_transition;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> env;  // Given to every command in the sandbox.
  Limits limits;
  StartPath start_path = StartPath::kCold;  // kWarm if it was taken from the warm pool.
  std::string token;                        // The per-sandbox API's bearer token. Never logged.
  bool paused = false;  // Frozen (Pause): its API refuses commands and files until Resume.
};

// A new sandbox id, "sb-" and 20 random hex digits (80 bits: collisions are moot). Every id the
// agent gives the backend comes from here, warm pool included.
absl::StatusOr<std::string> NewSandboxId();

class Registry {
 public:
  explicit Registry(const Clock* clock) : clock_(clock) {}

  // Adds a record; sets created/last_transition to now. AlreadyExists if the id is taken.
  absl::Status Insert(SandboxRecord record);
  // Adds a record as it was (a re-adopted sandbox's: created is kept), in state ready.
  absl::Status Restore(SandboxRecord record);
  absl::StatusOr<SandboxRecord> Get(absl::string_view id) const;
  std::vector<SandboxRecord> List() const;  // Sorted by creation time, then id.
  absl::Status SetState(absl::string_view id, SandboxState state);
  // Sets `to` only if the state is `from`, atomically (a delete that begins meanwhile wins).
  // Returns whether it did.
  bool CompareAndSetState(absl::string_view id, SandboxState from, SandboxState to);
  // Moves a ready, running or failed sandbox to recycling. FailedPrecondition if it is still
  // being created (its backend Create has not returned) or already recycling.
  absl::StatusOr<SandboxRecord> BeginRecycle(absl::string_view id);
  // Sets a new expiry. InvalidArgument if it is not in the future; FailedPrecondition if the
  // sandbox is being recycled; NotFound.
  absl::StatusOr<absl::Time> Renew(absl::string_view id, absl::Time expires_at);
  absl::Status SetPaused(absl::string_view id, bool paused);
  absl::Status Remove(absl::string_view id);
  // Moves every ready/running sandbox whose expiry has passed to recycling and returns their ids.
  std::vector<std::string> TakeExpired();
  // True if `token` is the sandbox's token (constant-time compare). False for unknown ids.
  bool TokenMatches(absl::string_view id, absl::string_view token) const;
  // Counts by state; every state is present (possibly 0).
  std::map<SandboxState, int> CountByState() const;
  size_t size() const;

 private:
  const Clock* clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, SandboxRecord> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::agent
