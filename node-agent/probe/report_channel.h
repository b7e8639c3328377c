// The probe's side of its one-way channel to the agent: JSON lines written to a non-blocking
// pipe. The probe must never block on it (a stalled agent must not stall the watch over a
// sandbox), so lines the pipe cannot take yet wait in memory, within a bound:
//
//   queued:  [ first keep_first lines ][ last keep_last lines (a ring) ]
//                                     ▲
//            when the ring overflows, its oldest line is dropped and counted; once the first
//            lines are written, one {"type":"dropped","lines":K} line goes out before the ring.
//
// Heartbeats bypass the queue: only the newest unsent one is kept, and it is written before any
// queued line, so a flood of events can neither starve nor delay liveness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "util/unique_fd.h"

namespace moat::agent::probe {

struct ReportChannelOptions {
  size_t keep_first = 64;
  size_t keep_last = 64;
  // Longer lines are cut (their "detail" shortened) so that every line fits in one atomic pipe
  // write (PIPE_BUF) and the queue's memory is bounded by (keep_first + keep_last) * this.
  size_t max_line_bytes = 4096;
};

class ReportChannel {
 public:
  // Takes the write end of the pipe and makes it non-blocking. The process must ignore SIGPIPE
  // (a pipe has no MSG_NOSIGNAL) so that a reader that went away shows as EPIPE.
  static absl::StatusOr<ReportChannel> Create(UniqueFd fd, ReportChannelOptions options = {});

  // Queues one event line and writes what the pipe takes now. Adds "seq" (counts every line the
  // probe produced, so the agent can see gaps).
  void Send(nlohmann::json line);
  // Replaces any unsent heartbeat with this one and writes what the pipe takes now.
  void SendHeartbeat(nlohmann::json line);

  // Writes queued lines until the pipe is full or nothing is left. Never blocks. Once the
  // reader has gone (EPIPE), everything is discarded: nobody is listening.
  void Flush();

  bool has_pending() const {
    return !partial_.empty() || !heartbeat_.empty() || !first_.empty() || !last_.empty() ||
           dropped_ > 0;
  }
  bool reader_gone() const { return reader_gone_; }
  int fd() const { return fd_.get(); }
  uint64_t dropped_total() const { return dropped_total_; }

 private:
  ReportChannel(UniqueFd fd, ReportChannelOptions options)
      : fd_(std::move(fd)), options_(options) {}

  std::string Serialize(nlohmann::json& line);
  // Writes `data` from `offset`; returns false if the pipe is full (the rest goes to partial_).
  bool WriteOut(const std::string& data, size_t offset = 0);

  UniqueFd fd_;
  ReportChannelOptions options_;
  uint64_t seq_ = 0;
  std::string partial_;  // the rest of a line the pipe took only part of; always goes first
  std::string heartbeat_;
  std::deque<std::string> first_;
  std::deque<std::string> last_;
  uint64_t dropped_ = 0;  // dropped since the last "dropped" line
  uint64_t dropped_total_ = 0;
  bool overflowing_ = false;  // lines go to last_ until first_ has drained
  bool reader_gone_ = false;
};

}  // namespace moat::agent::probe
