// Secrets of the API: the node token (from a file) and per-sandbox tokens (random).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat {

// Reads the node API's bearer token: the file's first line, without surrounding whitespace.
// Refuses files that others can read or write (the token would leak), symlinks, non-regular
// files, and tokens shorter than 16 bytes.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);
// The whole text (at most 4 KiB) of a secret file, with the same checks (no symlink, regular
// file, mode without group or other bits). For files of several secrets (the controller's keys).
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

// A fresh random token: 32 bytes from the kernel's CSPRNG, hex-encoded.
absl::StatusOr<std::string> NewToken();

// Compares in time that depends only on the lengths, so a caller cannot learn a token byte by
// byte from response times.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// "Bearer <token>" -> "<token>"; empty if the header is not a bearer credential.
absl::string_view BearerToken(absl::string_view authorization_header);

}  // namespace moat
