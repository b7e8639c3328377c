// The end-to-end suites' time scale: how much longer than on real hardware a test gives moat,
// its sandboxes and the agent before it calls them hung. The real-kernel lanes set it, where
// every process is many times slower (emulation: fork 20-50x, system calls 3-25x).
#pragma once

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"

namespace moat::e2e {

// $MOAT_E2E_TIME_SCALE (1 to 20; default 1; the x86-64 VM lane sets 4, the ARM64 one 8): the
// factor for the harnesses' hang deadlines and the tests' waits. Never applied to what moat itself
// reports (wall_seconds, cpu_seconds against its limits): only to how long a test gives it.
inline double HangScale() {
  static const double scale = [] {
    const char* value = std::getenv("MOAT_E2E_TIME_SCALE");
    double v = 1;
    if (value == nullptr || !absl::SimpleAtod(value, &v) || v < 1) return 1.0;
    return std::min(v, 20.0);
  }();
  return scale;
}

// `seconds` times HangScale(): the tests' waits for a sandbox or the agent to get somewhere, and
// the bounds that tell "returned promptly" from "waited for something it should not have" (a
// 30 s sleep, daemons). Each such bound stays below what it tells apart up to the lanes' scales:
// a bound that would not says so where it is.
inline double Scaled(double seconds) { return seconds * HangScale(); }
inline absl::Duration Scaled(absl::Duration d) { return d * HangScale(); }
// A poll loop's number of rounds, scaled: `for (int i = 0; i < Rounds(100) && ...; ++i)`.
inline int Rounds(int n) { return static_cast<int>(n * HangScale()); }

}  // namespace moat::e2e
