// The SSE events of a command's stream, written straight into the stream's buffer.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moat::agent {

// Appends `text` as a JSON string, quotes included, byte for byte as nlohmann's
// dump(-1, ' ', false, error_handler_t::replace) writes it: `"`, `\` and control bytes escaped
// (\b \t \n \f \r, else \u00xx), other UTF-8 passed through, and each invalid UTF-8 sequence
// replaced by one U+FFFD where nlohmann's decoder rejects it (sse_event_test.cc compares the
// two on tricky and random input). Exists because building a json object per output line and
// nlohmann's escaping were most of the agent's time while streaming (docs/performance.md).
void AppendJsonString(absl::string_view text, std::string* out);

// Appends `data: <event>\n\n`, the event a line of output becomes: the same bytes as
// SseEvent({{"type", type}, {"text", text}, {"timestamp", timestamp_ms}} plus
// {"partial", true} when `partial`), keys in nlohmann's (sorted) order.
void AppendOutputEvent(absl::string_view type, absl::string_view text, bool partial,
                       int64_t timestamp_ms, std::string* out);

// `data: <event>\n\n` of any event, through nlohmann (the rare ones: init, error, ping...).
std::string SseEvent(const nlohmann::json& event);

}  // namespace moat::agent
