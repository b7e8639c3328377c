// Which execd commands may skip the shell: a command of plain words, as `bash -c` does for its
// last simple command. Every command is `/bin/sh -c COMMAND` by the execd contract, and dash
// (Debian's sh) vforks even the last simple command of a -c string, so `sh -c /bin/true` is two
// programs started instead of one (docs/performance.md: a third of the machine per warm
// command). A command whose words the shell would pass through unchanged (no quoting, no
// expansion, no redirection, no operator, no assignment, not a builtin or reserved word) runs
// the same when exec'd directly with the same PATH search; the caller still falls back to the
// shell when that exec fails, so the shell's own messages and exit codes stay.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace moat::agent {

// The argv to exec directly for `command`, or nullopt if it needs the shell. `path` is the
// command's PATH (a first word without '/' is searched there, as the shell would): a PATH with
// an empty entry (the working directory, for the shell) needs the shell too.
std::optional<std::vector<std::string>> DirectArgv(absl::string_view command,
                                                   absl::string_view path);

}  // namespace moat::agent
