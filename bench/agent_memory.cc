#include "bench/agent_memory.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moat::bench {

absl::StatusOr<uint64_t> KbFieldBytes(absl::string_view text, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) break;
    uint64_t kb = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb)) break;
    return kb * 1024;
  }
  return absl::NotFoundError(absl::StrCat("no \"", name, ": N kB\" line"));
}

std::optional<MemoryCgroupMount> FindMemoryCgroupMount(absl::string_view mounts) {
  std::optional<MemoryCgroupMount> v2;
  for (absl::string_view line : absl::StrSplit(mounts, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() < 4) continue;
    if (f[2] == "cgroup") {
      for (absl::string_view option : absl::StrSplit(f[3], ',')) {
        if (option == "memory") return MemoryCgroupMount{std::string(f[1]), false};
      }
    } else if (f[2] == "cgroup2" && !v2.has_value()) {
      v2 = MemoryCgroupMount{std::string(f[1]), true};
    }
  }
  return v2;
}

std::optional<std::string> CgroupPathOf(absl::string_view proc_cgroup,
                                        absl::string_view controller) {
  for (absl::string_view line : absl::StrSplit(proc_cgroup, '\n', absl::SkipEmpty())) {
    // "ID:CONTROLLERS:PATH"; the path may itself hold ':'.
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (controller.empty()) {
      if (f[0] == "0" && f[1].empty()) return std::string(f[2]);
      continue;
    }
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == controller) return std::string(f[2]);
    }
  }
  return std::nullopt;
}

absl::StatusOr<ProcStat> ParseProcStat(absl::string_view stat) {
  // "PID (COMM) STATE PPID ..."; COMM may hold spaces and ')', so the last ')' ends it.
  const size_t open = stat.find('(');
  const size_t close = stat.rfind(')');
  if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) {
    return absl::InvalidArgumentError("stat text without \"(comm)\"");
  }
  std::vector<absl::string_view> rest =
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
  ProcStat out;
  out.comm = std::string(stat.substr(open + 1, close - open - 1));
  if (rest.size() < 2 || !absl::SimpleAtoi(rest[1], &out.ppid)) {
    return absl::InvalidArgumentError("stat text without a parent pid after the state");
  }
  return out;
}

std::optional<uint64_t> KeyValue(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, " ")) continue;
    uint64_t out = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &out)) return out;
  }
  return std::nullopt;
}

std::optional<double> MetricValue(absl::string_view exposition, absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n', absl::SkipEmpty())) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) continue;
    // A sample may carry a timestamp after the value.
    absl::string_view value = line.substr(0, line.find(' '));
    double out = 0;
    if (absl::SimpleAtod(value, &out)) return out;
  }
  return std::nullopt;
}

}  // namespace moat::bench
