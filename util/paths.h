// Lexical path helpers shared by every layer (no file system access).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace moat {

// Lexical normalisation of an absolute path: "a/./b/../c/" -> "/a/c"; ".." at "/" stays at "/",
// as the kernel does.
std::string NormalizeAbsolutePath(absl::string_view path);

// Whether `path` is `root` or inside it (both absolute and normalised): "/a/b" is under "/a",
// "/ab" is not.
bool IsPathUnder(absl::string_view path, absl::string_view root);

}  // namespace moat
