#include "util/token.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/errno_status.h"
#include "util/status_macros.h"
#include "util/unique_fd.h"

namespace moat {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  // O_NOFOLLOW: a symlink could point the agent at a file someone else controls.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    return ErrnoStatus(
        absl::StrCat("opening the token file \"", path, "\" (a regular file, no symlink)"), errno);
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus(absl::StrCat("stat \"", path, "\""), errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the token file \"", path, "\" is not a regular file"));
  }
  if ((st.st_mode & 0077) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the token file \"%s\" has mode %04o: others could read or change the token; run "
        "chmod 600 \"%s\"",
        path, st.st_mode & 07777, path));
  }
  constexpr size_t kMaxTokenFile = 4096;
  std::string text(kMaxTokenFile, '\0');
  ssize_t n = read(fd.get(), text.data(), text.size());
  if (n < 0) return ErrnoStatus(absl::StrCat("reading \"", path, "\""), errno);
  text.resize(static_cast<size_t>(n));
  return text;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadSecretFile(path));
  absl::string_view token = text;
  token = token.substr(0, token.find('\n'));
  token = absl::StripAsciiWhitespace(token);
  if (token.size() < 16) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the token in \"", path,
        "\" is shorter than 16 bytes; write a long random one (openssl rand -hex 32)"));
  }
  return std::string(token);
}

absl::StatusOr<std::string> NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("the random generator failed; cannot make a sandbox token");
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::string_view BearerToken(absl::string_view header) {
  constexpr absl::string_view kScheme = "Bearer ";
  if (header.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(header.substr(0, kScheme.size()), kScheme)) {
    return {};
  }
  return absl::StripAsciiWhitespace(header.substr(kScheme.size()));
}

}  // namespace moat
