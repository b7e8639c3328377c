// Command lines for a sandbox's /bin/sh -c built from words, and a sandbox's entrypoint (its main
// process, as OpenSandbox's create starts it) as the two commands that start it: a check that the
// program can run, then its exec. The agent runs them in its create (POST /v1/sandboxes with
// "entrypoint"); the controller runs the same two through execd on an agent without that field.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace moat {

// POSIX sh single quoting: the word reads back as `word`.
std::string ShellQuote(absl::string_view word);

// "exec 'w0' 'w1' ...": the words as a process (no shell left), each read back as it is.
std::string ExecCommand(const std::vector<std::string>& words);

// Exits 0 if and only if `program` is one the sandbox can run: a path (it has a "/") to an
// executable file, or a name its PATH (or the shell, for a builtin) resolves. Without it,
// `sh -c 'exec prog'` starts whatever happens to prog: a missing program would surface only as
// exit 127 after the create answered.
std::string EntrypointCheckCommand(absl::string_view program);

// What a create is told (a 400) when the check fails.
std::string EntrypointNotRunnableMessage(absl::string_view program);

// The error code of that 400 on the agent's node API, so the controller tells it apart from a
// failing node (it places the sandbox nowhere else: every node would refuse it alike).
inline constexpr char kEntrypointNotRunnableCode[] = "ENTRYPOINT_NOT_RUNNABLE";

}  // namespace moat
