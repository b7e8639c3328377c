// Capabilities: the command runs with none, in every set, and cannot regain them.
#pragma once

namespace moat::sandbox {

// Parent side: the highest capability number this kernel knows (/proc/sys/kernel/cap_last_cap).
int LastCapability();

// Child side, async-signal-safe. Locks the securebits so that uid 0 gains nothing at execve,
// empties the bounding and ambient sets, then the effective, permitted and inheritable sets, and
// sets no_new_privs. Returns false after reporting to `error_fd`.
bool DropAllCapabilities(int last_cap, int error_fd);

}  // namespace moat::sandbox
