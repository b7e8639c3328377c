#include "sandbox/output/result.h"

namespace moat::sandbox {

const char* RunStatusName(RunStatus status) {
  switch (status) {
    case RunStatus::kExited:
      return "exited";
    case RunStatus::kSignaled:
      return "signaled";
    case RunStatus::kWallTimeout:
      return "wall_timeout";
    case RunStatus::kCpuTimeout:
      return "cpu_timeout";
    case RunStatus::kOomKilled:
      return "oom_killed";
  }
  return "unknown";
}

nlohmann::json ToJson(const RunResult& r) {
  nlohmann::json j;
  j["status"] = RunStatusName(r.status);
  j["exit_code"] = r.exit_code ? nlohmann::json(*r.exit_code) : nlohmann::json(nullptr);
  j["signal"] = r.signal ? nlohmann::json(*r.signal) : nlohmann::json(nullptr);
  j["stdout"] = r.stdout_text.text;
  j["stderr"] = r.stderr_text.text;
  j["stdout_truncated"] = r.stdout_text.truncated;
  j["stderr_truncated"] = r.stderr_text.truncated;
  j["wall_seconds"] = r.wall_seconds;
  j["cpu_seconds"] = r.cpu_seconds;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  nlohmann::json violations = nlohmann::json::array();
  for (const Violation& v : r.violations) {
    violations.push_back({{"kind", v.kind}, {"detail", v.detail}});
  }
  j["violations"] = std::move(violations);
  if (r.violations_dropped > 0) j["violations_dropped"] = r.violations_dropped;
  if (!r.notes.empty()) j["notes"] = r.notes;
  return j;
}

int ExitStatusFor(const RunResult& r) {
  switch (r.status) {
    case RunStatus::kExited:
      return r.exit_code.value_or(0);
    case RunStatus::kWallTimeout:
    case RunStatus::kCpuTimeout:
      return 124;
    case RunStatus::kSignaled:
    case RunStatus::kOomKilled:
      return 128 + r.signal.value_or(9);
  }
  return 125;
}

}  // namespace moat::sandbox
