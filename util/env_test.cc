#include "util/env.h"

#include <gtest/gtest.h>

namespace moat {
namespace {

TEST(OverrideEnvTest, ReplacesInPlaceAndAppendsNewNames) {
  EnvList env = {{"PATH", "/bin"}, {"HOME", "/tmp"}};
  OverrideEnv(&env, {{"HOME", "/workspace"}, {"LANG", "C"}, {"LANG", "C.UTF-8"}});
  EXPECT_EQ(env, (EnvList{{"PATH", "/bin"}, {"HOME", "/workspace"}, {"LANG", "C.UTF-8"}}));
}

}  // namespace
}  // namespace moat
