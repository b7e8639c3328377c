#include "bench/moat_trace.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moat::bench {

std::vector<TracePhase> ParseMoatTrace(absl::string_view output) {
  std::vector<TracePhase> phases;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::ConsumePrefix(&line, "moat trace:")) continue;
    line = absl::StripLeadingAsciiWhitespace(line);
    const size_t unit = line.find(" ms");
    double ms = 0;
    if (unit == absl::string_view::npos || !absl::SimpleAtod(line.substr(0, unit), &ms)) continue;
    const absl::string_view name = absl::StripAsciiWhitespace(line.substr(unit + 3));
    if (name.empty()) continue;
    phases.push_back({std::string(name), absl::Microseconds(ms * 1000.0)});
  }
  return phases;
}

std::string FormatTrace(const std::vector<TracePhase>& phases, absl::Duration total) {
  std::string out = absl::StrFormat("  %-44s %9s %9s\n", "phase (ends at)", "at ms", "took ms");
  absl::Duration previous;
  for (const TracePhase& p : phases) {
    absl::StrAppendFormat(&out, "  %-44s %9.3f %9.3f\n", p.name, absl::ToDoubleMilliseconds(p.at),
                          absl::ToDoubleMilliseconds(p.at - previous));
    previous = p.at;
  }
  absl::StrAppendFormat(&out, "  %-44s %9s %9.3f\n",
                        "outside the timeline (exec, load, policy, exit)", "",
                        absl::ToDoubleMilliseconds(total - previous));
  absl::StrAppendFormat(&out, "  %-44s %9s %9.3f\n", "total, measured by the bench", "",
                        absl::ToDoubleMilliseconds(total));
  return out;
}

}  // namespace moat::bench
