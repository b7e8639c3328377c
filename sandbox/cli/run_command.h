// `moat run`: resolve the policy, run the command in a sandbox, report.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/cli/run_flags.h"
#include "sandbox/policy/policy.h"

namespace moat::cli {

// The policy layers the flags name: the home, the project directory (--cwd, else moat's own),
// --user-policy files, --policy and the flags' own layer. Shared with `moat policy show`.
struct PolicyInputs {
  sandbox::PolicySources sources;
  std::optional<std::string> working_dir;  // --cwd, absolute
  sandbox::PathContext invocation;         // moat's own home and directory, for file flags
};
absl::StatusOr<PolicyInputs> PolicyInputsFor(const RunFlags& flags);

// `args` excludes the program name and "run". Returns the process exit status.
int RunCommandMain(const std::vector<std::string>& args);

}  // namespace moat::cli
