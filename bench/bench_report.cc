#include "bench/bench_report.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace moat::bench {
namespace {

std::string Ms(absl::Duration d) { return absl::StrFormat("%.2f", absl::ToDoubleMilliseconds(d)); }

}  // namespace

double MoatRatio(const std::vector<CaseResult>& results, const CaseResult& row) {
  if (!row.skipped.empty() || row.summary.runs == 0 || row.summary.median <= absl::ZeroDuration()) {
    return 0;
  }
  for (const CaseResult& moat : results) {
    if (moat.runner == kMoatRunner && moat.command == row.command && moat.skipped.empty() &&
        moat.summary.runs > 0) {
      return absl::FDivDuration(moat.summary.median, row.summary.median);
    }
  }
  return 0;
}

std::string FormatResultTable(const std::vector<CaseResult>& results) {
  size_t command_width = 7;
  for (const CaseResult& r : results) command_width = std::max(command_width, r.command.size());
  const int w = static_cast<int>(command_width);
  std::string out =
      absl::StrFormat("%-*s  %-10s %5s %6s %10s %10s %10s %12s\n", w, "command", "runner", "runs",
                      "failed", "median ms", "p90 ms", "min ms", "moat/runner");
  std::string failures;
  for (const CaseResult& r : results) {
    if (!r.skipped.empty()) {
      absl::StrAppendFormat(&out, "%-*s  %-10s skipped: %s\n", w, r.command, r.runner, r.skipped);
      continue;
    }
    const double ratio = MoatRatio(results, r);
    absl::StrAppendFormat(&out, "%-*s  %-10s %5d %6d %10s %10s %10s %12s\n", w, r.command, r.runner,
                          r.summary.runs, r.failed, Ms(r.summary.median), Ms(r.summary.p90),
                          Ms(r.summary.min), ratio > 0 ? absl::StrFormat("%.2fx", ratio) : "-");
    if (r.failed > 0) {
      absl::StrAppendFormat(&failures,
                            "failed runs: %s on `%s`: %d, left out of its times; first: %s\n",
                            r.runner, r.command, r.failed, r.failure);
    }
  }
  return out + failures;
}

}  // namespace moat::bench
