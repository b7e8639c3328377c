// The agent's recent events: violations, compromised sandboxes, limits approached or enforced,
// sandboxes that died. Each is also a log line and a metric; this list is what the controller
// (or an operator with curl) reads back through GET /v1/events. Bounded: the oldest go first.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace moat::agent {

struct AgentEvent {
  uint64_t seq = 0;  // increasing from 1; a reader asks for events after the last it saw
  absl::Time time;
  std::string type;  // "violation", "compromised", "near_limit", "killed", "exited"
  std::string sandbox_id;
  std::string kind;    // e.g. the violation's kind ("syscall", "mount", ...) or the resource
  std::string detail;  // human-readable, from the probe or the agent
};

class EventLog {
 public:
  explicit EventLog(size_t capacity = 1000) : capacity_(capacity) {}

  // Returns the event's seq. Details longer than 1 KiB are cut.
  uint64_t Add(absl::Time time, absl::string_view type, absl::string_view sandbox_id,
               absl::string_view kind, absl::string_view detail);
  // Events with seq > `after`, oldest first, at most `limit`.
  std::vector<AgentEvent> Since(uint64_t after, size_t limit) const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<AgentEvent> events_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace moat::agent
