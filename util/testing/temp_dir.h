// Test helper: a directory of the test's own, removed with everything in it when the helper goes,
// so that tests leave nothing behind. Removal is util's RemoveTreeAt: no symlink a test planted
// is followed and no mount is crossed (a test unmounts what it mounted, in its TearDown).
//
// Header-only, for tests and test harnesses of every layer (util/testing sits on util).
#pragma once

#include <fcntl.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "util/errno_status.h"
#include "util/remove_tree.h"
#include "util/unique_fd.h"

namespace moat {

class ScopedTempDir {
 public:
  // Makes "<parent>/<prefix>.XXXXXX" (mode 0700). Failing to is a fatal failure of the running
  // test: made by a fixture (a member, or in SetUp), the test body does not run.
  explicit ScopedTempDir(absl::string_view prefix = "moat-test",
                         absl::string_view parent = ::testing::TempDir()) {
    Make(prefix, parent);
  }
  ~ScopedTempDir() {
    if (path_.empty()) return;
    absl::Status removed = Remove();
    EXPECT_TRUE(removed.ok()) << "the test left \"" << path_ << "\" behind: " << removed;
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name
  std::string File(absl::string_view name) const { return absl::StrCat(path_, "/", name); }

 private:
  void Make(absl::string_view prefix, absl::string_view parent) {
    std::string pattern = absl::StrCat(absl::StripSuffix(parent, "/"), "/", prefix, ".XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) {
      FAIL() << "cannot make a temporary directory \"" << pattern << "\": " << std::strerror(errno);
    }
    path_ = pattern;
  }

  absl::Status Remove() const {
    const size_t slash = path_.rfind('/');
    const std::string parent = slash == 0 ? "/" : path_.substr(0, slash);
    UniqueFd dir(::open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) return ErrnoStatus(absl::StrCat("open \"", parent, "\""));
    return RemoveTreeAt(dir.get(), path_.c_str() + slash + 1);
  }

  std::string path_;
};

}  // namespace moat
