// The start-up benchmark's result table: one row per (command, runner) case, with moat's median
// divided by each runner's median for the same command.
#pragma once

#include <string>
#include <vector>

#include "bench/latency_stats.h"

namespace moat::bench {

inline constexpr char kMoatRunner[] = "moat";

struct CaseResult {
  std::string command;     // as shown: "/bin/true", "/usr/bin/python3 -c pass"
  std::string runner;      // "moat", "bwrap", "crun", ...; kMoatRunner is the reference
  LatencySummary summary;  // of the runs that succeeded
  int failed = 0;          // timed runs that failed, left out of `summary`
  std::string failure;     // why the first of them failed
  std::string skipped;     // when not empty, why this case has no numbers at all
};

// moat's median over `runner`'s for the same command, or 0 when either has no numbers.
double MoatRatio(const std::vector<CaseResult>& results, const CaseResult& row);

// The table, rows in the order given. Times in milliseconds; the ratio column reads "moat takes
// this many times as long as the runner" (1.00 on moat's own rows). Cases with failed runs get a
// line each after the table, with the first failure's reason.
std::string FormatResultTable(const std::vector<CaseResult>& results);

}  // namespace moat::bench
