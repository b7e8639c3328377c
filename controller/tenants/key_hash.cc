#include "controller/tenants/key_hash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "util/status_macros.h"

namespace moat::controller {
namespace {

constexpr absl::string_view kPrefix = "msk_";
constexpr size_t kIdBytes = 8, kSecretBytes = 32, kSaltBytes = 16, kHashBytes = 32;

absl::StatusOr<std::string> RandomHex(size_t n) {
  std::string bytes(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n)) != 1) {
    return absl::InternalError("OpenSSL's RAND_bytes failed: no randomness for a key");
  }
  return absl::BytesToHexString(bytes);
}

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(c) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

// Raw PBKDF2 bytes, or empty if OpenSSL failed.
std::string Derive(absl::string_view plaintext, absl::string_view salt_hex, int rounds) {
  std::string salt = absl::HexStringToBytes(salt_hex);
  std::string out(kHashBytes, '\0');
  if (PKCS5_PBKDF2_HMAC(plaintext.data(), static_cast<int>(plaintext.size()),
                        reinterpret_cast<const unsigned char*>(salt.data()),
                        static_cast<int>(salt.size()), rounds, EVP_sha256(), kHashBytes,
                        reinterpret_cast<unsigned char*>(out.data())) != 1) {
    return "";
  }
  return out;
}

}  // namespace

absl::StatusOr<KeyHash> HashKey(absl::string_view plaintext, int rounds) {
  if (rounds < 1) return absl::InvalidArgumentError("key hash rounds must be at least 1");
  KeyHash h;
  h.rounds = rounds;
  ASSIGN_OR_RETURN(h.salt, RandomHex(kSaltBytes));
  std::string derived = Derive(plaintext, h.salt, rounds);
  if (derived.empty()) return absl::InternalError("OpenSSL's PBKDF2 failed hashing a key");
  h.hash = absl::BytesToHexString(derived);
  return h;
}

absl::StatusOr<NewKey> MakeKey(int rounds) {
  NewKey key;
  ASSIGN_OR_RETURN(key.id, RandomHex(kIdBytes));
  ASSIGN_OR_RETURN(std::string secret, RandomHex(kSecretBytes));
  key.plaintext = absl::StrCat(kPrefix, key.id, "_", secret);
  ASSIGN_OR_RETURN(key.hash, HashKey(key.plaintext, rounds));
  return key;
}

bool VerifyKey(absl::string_view plaintext, const KeyHash& hash) {
  if (hash.rounds < 1 || hash.hash.size() != 2 * kHashBytes || !IsLowerHex(hash.hash) ||
      !IsLowerHex(hash.salt)) {
    return false;
  }
  std::string derived = Derive(plaintext, hash.salt, hash.rounds);
  std::string expected = absl::HexStringToBytes(hash.hash);
  return derived.size() == kHashBytes &&
         CRYPTO_memcmp(derived.data(), expected.data(), kHashBytes) == 0;
}

absl::StatusOr<std::string> KeyId(absl::string_view plaintext) {
  absl::string_view rest = plaintext;
  if (!absl::ConsumePrefix(&rest, kPrefix) || rest.size() != 2 * (kIdBytes + kSecretBytes) + 1 ||
      rest[2 * kIdBytes] != '_') {
    return absl::InvalidArgumentError("not a moat API key (msk_<id>_<secret>)");
  }
  absl::string_view id = rest.substr(0, 2 * kIdBytes);
  if (!IsLowerHex(id) || !IsLowerHex(rest.substr(2 * kIdBytes + 1))) {
    return absl::InvalidArgumentError("not a moat API key (msk_<id>_<secret>)");
  }
  return std::string(id);
}

}  // namespace moat::controller
