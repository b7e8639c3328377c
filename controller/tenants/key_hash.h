// API keys at rest: a key is shown once, when it is made, and the store keeps only a salted,
// slow hash of it (PBKDF2-HMAC-SHA256 from OpenSSL's libcrypto), so a copy of the store or a
// backup does not hand out working keys.
//
// A key reads "msk_<id>_<secret>": the id (16 hex digits) names the key's record, so checking a
// key costs one hash, not one per stored key; the secret is 32 random bytes (64 hex digits).
// The id is not secret (it is listed, and names the key in rotate and revoke).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::controller {

// 100k rounds: ~30 ms here per check, paid once per key and process (TenantRegistry remembers
// keys it has checked). The secret is 256 random bits, so the rounds only slow an attacker who
// holds the store from testing guesses; they cannot make a short key safe.
inline constexpr int kDefaultKeyHashRounds = 100'000;

struct KeyHash {
  std::string salt;  // 16 random bytes, hex.
  std::string hash;  // PBKDF2-HMAC-SHA256(secret, salt, rounds), 32 bytes, hex.
  int rounds = kDefaultKeyHashRounds;
};

struct NewKey {
  std::string id;         // 16 hex digits.
  std::string plaintext;  // "msk_<id>_<secret>": give it to the caller, never store it.
  KeyHash hash;
};

// A fresh key (random id and secret from RAND_bytes) and its hash.
absl::StatusOr<NewKey> MakeKey(int rounds = kDefaultKeyHashRounds);

// The hash of `plaintext` with a fresh salt.
absl::StatusOr<KeyHash> HashKey(absl::string_view plaintext, int rounds);

// Whether `plaintext` hashes to `hash` (compared in constant time: CRYPTO_memcmp).
bool VerifyKey(absl::string_view plaintext, const KeyHash& hash);

// The id in "msk_<id>_<secret>", or InvalidArgument if `plaintext` has not that shape.
absl::StatusOr<std::string> KeyId(absl::string_view plaintext);

}  // namespace moat::controller
