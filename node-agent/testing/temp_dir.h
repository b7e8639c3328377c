// Test helper: a directory of its own under the test temporary directory, removed with
// everything in it when the helper goes, so that tests leave nothing in /tmp.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace moat::agent::testing {

class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string pattern = std::string(::testing::TempDir()) + "/moat-agent-test.XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
    EXPECT_FALSE(path_.empty()) << "cannot make a temporary directory under "
                                << ::testing::TempDir();
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace moat::agent::testing
