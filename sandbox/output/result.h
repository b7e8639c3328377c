// What one run of a sandboxed command produced, and its JSON form (the `moat run --json` contract).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sandbox/output/sanitizer.h"

namespace moat::sandbox {

enum class RunStatus { kExited, kSignaled, kWallTimeout, kCpuTimeout, kOomKilled };

// "exited", "signaled", "wall_timeout", "cpu_timeout", "oom_killed".
const char* RunStatusName(RunStatus status);

struct Violation {
  std::string kind;    // "seccomp", "memory", "pids", "network", ...
  std::string detail;  // e.g. "mount", "a process was killed by the OOM killer"
};

struct RunResult {
  RunStatus status = RunStatus::kExited;
  std::optional<int> exit_code;  // set when status is kExited
  std::optional<int> signal;     // the signal that ended the command, if one did
  SanitizedText stdout_text;     // cleaned; empty when output was streamed live
  SanitizedText stderr_text;
  double wall_seconds = 0;
  double cpu_seconds = 0;
  uint64_t peak_memory_bytes = 0;
  std::vector<Violation> violations;
  uint64_t violations_dropped = 0;  // beyond the recorded maximum
  // What the policy means that a reader of the result should know (e.g. how a denyWrite glob
  // treats files made during the run). In the JSON only when there are any.
  std::vector<std::string> notes;
};

nlohmann::json ToJson(const RunResult& result);

// The exit status of `moat run` without --json: the command's; 128+N if killed by signal N; 124
// on a wall or CPU timeout.
int ExitStatusFor(const RunResult& result);

}  // namespace moat::sandbox
