// `moat run`: resolve the policy, run the command in a sandbox, report.
#pragma once

#include <string>
#include <vector>

namespace moat::cli {

// `args` excludes the program name and "run". Returns the process exit status.
int RunCommandMain(const std::vector<std::string>& args);

}  // namespace moat::cli
