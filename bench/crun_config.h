// Per-command OCI configs for the crun runner, made from the bundle's config.json (written by
// bench/run.sh). An OCI config names the command in process.args, so each command under test
// gets its own file, passed to `crun run --config`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace moat::bench {

// Writes to `out_path` the config at `template_path` with process.args set to `argv` and
// process.terminal false (the bench gives no terminal). Everything else is kept as written.
absl::Status WriteCrunConfig(const std::string& template_path, const std::vector<std::string>& argv,
                             const std::string& out_path);

}  // namespace moat::bench
