// One line per event to stderr, as moat-agent logs (node-agent/log.h), with this daemon's name;
// journald adds the time and unit. Never log tokens or API keys.
#pragma once

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace moat::controller {

inline void LogLine(absl::string_view level, absl::string_view message) {
  std::string line = absl::StrCat("moat-controller ", level, ": ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}
inline void LogInfo(absl::string_view message) { LogLine("info", message); }
inline void LogWarning(absl::string_view message) { LogLine("warning", message); }
inline void LogError(absl::string_view message) { LogLine("error", message); }

}  // namespace moat::controller
