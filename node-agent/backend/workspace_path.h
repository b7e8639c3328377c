// Paths that API callers give for files in a sandbox, checked before any backend sees them.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::agent {

// Maps a sandbox path ("/workspace/a/b", "a/b", "/workspace") to the path relative to the
// workspace ("a/b", ""). Refuses (InvalidArgument) anything that is or could lead outside it:
// "..", absolute paths elsewhere, NUL and other control bytes, over 4096 bytes. "." and empty
// components are dropped. This is a lexical check; the real backend must still resolve the
// result without following symlinks out (RESOLVE_IN_ROOT), since sandbox code can make symlinks.
absl::StatusOr<std::string> WorkspaceRelativePath(absl::string_view path);

// Maps a sandbox path to the path relative to the sandbox's root ("/tmp/a" -> "tmp/a", "/" ->
// ""); a relative path is relative to /workspace ("a/b" -> "workspace/a/b"). Refuses what
// WorkspaceRelativePath refuses but absolute paths: "..", control bytes, over 4096 bytes. Where
// the result leads is for the backend's resolution inside the sandbox's root to say.
absl::StatusOr<std::string> SandboxRootRelativePath(absl::string_view path);

}  // namespace moat::agent
