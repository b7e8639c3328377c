// moat's own setup timeline: with MOAT_TRACE=1, `moat run` prints to stderr one line per setup
// phase, "moat trace: <ms> ms  <phase>", times counted from the start of the run proper (after
// moat has started and resolved its policy).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace moat::bench {

struct TracePhase {
  std::string name;
  absl::Duration at;  // when the phase ended, from the timeline's zero
};

// The phases in `output` in the order printed; other lines are ignored.
std::vector<TracePhase> ParseMoatTrace(absl::string_view output);

// A small table of the phases, each with its own duration (the gap since the previous one), and
// a last line for what the timeline does not cover (process start, loading, policy, exit):
// `total` (measured from outside) minus the last phase's time.
std::string FormatTrace(const std::vector<TracePhase>& phases, absl::Duration total);

}  // namespace moat::bench
