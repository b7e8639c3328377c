// Network namespace: the sandbox has only its own loopback, with no route anywhere else.
#pragma once

namespace moat::sandbox {

// Child side, async-signal-safe: brings `lo` up (127.0.0.1 and ::1 come with it).
bool BringUpLoopback(int error_fd);

}  // namespace moat::sandbox
