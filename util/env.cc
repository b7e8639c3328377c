#include "util/env.h"

#include <algorithm>

namespace moat {

void OverrideEnv(EnvList* env, const EnvList& overrides) {
  for (const auto& entry : overrides) {
    auto it = std::find_if(env->begin(), env->end(),
                           [&](const auto& e) { return e.first == entry.first; });
    if (it != env->end()) {
      it->second = entry.second;
    } else {
      env->push_back(entry);
    }
  }
}

}  // namespace moat
