// `moat policy show`: the policy a `moat run` with the same options would use, and which layer
// each value came from.
#pragma once

#include <string>
#include <vector>

namespace moat::cli {

// `args` excludes the program name and "policy". Returns the process exit status.
int PolicyCommandMain(const std::vector<std::string>& args);

}  // namespace moat::cli
