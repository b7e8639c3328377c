// The SSE events of a command's stream, written straight into the stream's buffer.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "node-agent/api/command_table.h"

namespace moat::agent {

// Appends `text` as a JSON string, quotes included, byte for byte as nlohmann's
// dump(-1, ' ', false, error_handler_t::replace) writes it: `"`, `\` and control bytes escaped
// (\b \t \n \f \r, else \u00xx), other UTF-8 passed through, and each invalid UTF-8 sequence
// replaced by one U+FFFD where nlohmann's decoder rejects it (sse_event_test.cc compares the
// two on tricky and random input). Exists because building a json object per output line and
// nlohmann's escaping were most of the agent's time while streaming (docs/performance.md).
void AppendJsonString(absl::string_view text, std::string* out);

// Appends `data: <event>\n\n` for lines of output read at one time: the same bytes as
// SseEvent({{"type", "stdout" or "stderr"}, {"text", text}, {"timestamp", timestamp_ms}} plus
// {"partial", true} when `partial`), keys in nlohmann's (sorted) order. The events of one read
// share their timestamp, so its digits are written once, not once per line.
class OutputEventWriter {
 public:
  explicit OutputEventWriter(int64_t timestamp_ms);
  void Append(OutputStream stream, absl::string_view text, bool partial, std::string* out) const;

 private:
  std::string stdout_tail_;  // ,"timestamp":N,"type":"stdout"}\n\n
  std::string stderr_tail_;
};

// `data: <event>\n\n` of any event, through nlohmann (the rare ones: init, error, ping...).
std::string SseEvent(const nlohmann::json& event);

}  // namespace moat::agent
