// Environment lists as moat builds them: ordered NAME, VALUE pairs, each name once.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace moat {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// Sets each of `overrides` in `env`, in order: a name already there keeps its place and takes the
// new value, a new name goes at the end.
void OverrideEnv(EnvList* env, const EnvList& overrides);

}  // namespace moat
