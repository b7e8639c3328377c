#include "node-agent/event_log.h"

namespace moat::agent {

uint64_t EventLog::Add(absl::Time time, absl::string_view type, absl::string_view sandbox_id,
                       absl::string_view kind, absl::string_view detail) {
  constexpr size_t kMaxDetail = 1024;
  absl::MutexLock lock(&mu_);
  AgentEvent event;
  event.seq = next_seq_++;
  event.time = time;
  event.type = std::string(type);
  event.sandbox_id = std::string(sandbox_id);
  event.kind = std::string(kind);
  event.detail = std::string(detail.substr(0, kMaxDetail));
  events_.push_back(std::move(event));
  while (events_.size() > capacity_) events_.pop_front();
  return events_.back().seq;
}

std::vector<AgentEvent> EventLog::Since(uint64_t after, size_t limit) const {
  absl::MutexLock lock(&mu_);
  std::vector<AgentEvent> out;
  for (const AgentEvent& e : events_) {
    if (e.seq <= after) continue;
    if (out.size() >= limit) break;
    out.push_back(e);
  }
  return out;
}

}  // namespace moat::agent
