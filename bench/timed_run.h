// One timed run of a command: posix_spawn, then waitpid, measured on the monotonic clock. This
// is the whole measurement of the start-up benchmark, so it does as little as possible between
// the two clock reads.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace moat::bench {

struct RunSpec {
  std::vector<std::string> argv;  // argv[0] is the program's path; PATH is not searched
  std::vector<std::string> env;   // the whole environment, "NAME=value" entries
  // When >= 0, the process starts in this mount namespace: the caller joins it with setns just
  // before posix_spawn and returns to its own right after waitpid, both outside the timed span.
  int mount_ns_fd = -1;
};

struct RunOutcome {
  absl::Duration elapsed;     // from just before posix_spawn to waitpid's return
  int wait_status = 0;        // as from waitpid
  std::string output;         // stdout and stderr, interleaved; the first 64 KiB
  uint64_t output_bytes = 0;  // how many bytes they wrote in all
};

// Runs `spec` to completion with stdin on /dev/null and stdout and stderr in a memory file (no
// pipe that the parent would have to drain while it waits; nothing on the terminal). An error
// means the process could not be started or the namespace switch failed; a command that ran
// and failed is an outcome with its wait status. Must be called from a single-threaded process
// when `mount_ns_fd` is set (the kernel refuses setns into a mount namespace otherwise).
absl::StatusOr<RunOutcome> TimedRun(const RunSpec& spec);

// Whether the command exited with status 0.
bool Succeeded(const RunOutcome& outcome);

// A wait status in words, for messages: "exit status 1", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

// The environment of this process with every variable named in `drop` removed, plus `add`
// ("NAME=value" entries, which replace variables of the same name).
// The first executable `name` in $PATH (/usr/bin:/bin without one), or "" if none.
std::string FindInPath(const std::string& name);

std::vector<std::string> CurrentEnvironment(const std::vector<std::string>& drop = {},
                                            const std::vector<std::string>& add = {});

}  // namespace moat::bench
