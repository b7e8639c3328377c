// Debian's Abseil has no absl/log: the agent logs one line per event to stderr (journald adds
// the time and unit). Never log tokens.
#pragma once

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace moat::agent {

inline void LogLine(absl::string_view level, absl::string_view message) {
  std::string line = absl::StrCat("moat-agent ", level, ": ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}
inline void LogInfo(absl::string_view message) { LogLine("info", message); }
inline void LogWarning(absl::string_view message) { LogLine("warning", message); }
inline void LogError(absl::string_view message) { LogLine("error", message); }

}  // namespace moat::agent
