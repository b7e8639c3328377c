// The one way a value that came from a client or a sandbox (an id, a name, a path, a host, a
// field) is shown in an error or a log line: in double quotes, C-escaped (a newline cannot forge
// a log line, a control byte cannot reach a terminal), and cut at 80 bytes.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace moat {

std::string QuoteForMessage(absl::string_view text);

}  // namespace moat
