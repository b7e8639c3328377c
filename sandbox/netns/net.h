// Network namespace: the sandbox has only its own loopback, with no route anywhere else.
#pragma once

#include "absl/status/status.h"

namespace moat::sandbox {

// Child side, async-signal-safe: brings `lo` up (127.0.0.1 and ::1 come with it).
bool BringUpLoopback(int error_fd);

// Supervisor side, for the network namespace of the calling thread (the prepared namespace, or
// a sandbox's namespace joined with setns): the same, reported as a Status. Idempotent.
absl::Status BringUpLoopbackInThisThread();

}  // namespace moat::sandbox
