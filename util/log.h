// One line per event to stderr, prefixed with the program's name ("moat-agent info: ...");
// journald adds the time and unit. Debian's Abseil has no absl/log. Never log tokens or API keys.
#pragma once

#include <errno.h>  // program_invocation_short_name

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace moat {

inline void LogLine(absl::string_view level, absl::string_view message) {
  std::string line = absl::StrCat(program_invocation_short_name, " ", level, ": ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}
inline void LogInfo(absl::string_view message) { LogLine("info", message); }
inline void LogWarning(absl::string_view message) { LogLine("warning", message); }
inline void LogError(absl::string_view message) { LogLine("error", message); }

}  // namespace moat
