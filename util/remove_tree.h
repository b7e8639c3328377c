// Removing a directory tree that untrusted code controls and may change while we remove it.
#pragma once

#include "absl/status/status.h"

namespace moat {

// Removes `name` in the directory `dirfd` (which may be an O_PATH descriptor) and, if it is a
// directory, everything under it. Safe against a tree that is changed under us:
//  - no symlink is ever followed: each level is opened with openat2(RESOLVE_NO_SYMLINKS) beneath
//    the level above, so a directory swapped for a link to "/" is unlinked, not descended into;
//  - no mount is crossed (RESOLVE_NO_XDEV): a mount point inside the tree is left in place and
//    reported, its contents untouched;
//  - any depth, with no recursion and at most kMaxOpenLevels descriptors open: subtrees deeper
//    than that are renamed up into the tree's top directory and removed in a later pass.
// Everything that can be removed is; the first failure is returned (NotFound if `name` does not
// exist).
absl::Status RemoveTreeAt(int dirfd, const char* name);

// How many directory levels RemoveTreeAt holds open at once.
inline constexpr int kMaxOpenLevels = 128;

}  // namespace moat
