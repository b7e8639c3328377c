// Parameters of table-driven tests that carry their own name: gtest prints a case by its name and
// names the test after it (pass NameOf<Case> as INSTANTIATE_TEST_SUITE_P's last argument).
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

namespace moat::sandbox::testing {

// An input and the text it must become.
struct TextCase {
  std::string name;
  std::string input;
  std::string expected;
};

inline void PrintTo(const TextCase& c, std::ostream* os) { *os << c.name; }

// The test name of a case with a `name` field (letters, digits and underscores only).
template <typename Case>
std::string NameOf(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

}  // namespace moat::sandbox::testing
