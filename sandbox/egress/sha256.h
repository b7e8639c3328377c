// Incremental SHA-256 (libcrypto's EVP interface) of what a request sends, for the audit log's
// body fingerprint: enough to tell two uploads apart or match one against a known file, without
// keeping the bytes.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace moat::egress {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  uint64_t bytes() const { return bytes_; }

  // The first 16 hex digits of the digest of everything passed to Update(), or "" when that was
  // nothing (the audit log's "no body"). Ends the hash: call it once.
  std::string HexPrefix();

 private:
  EVP_MD_CTX* ctx_;
  uint64_t bytes_ = 0;
};

}  // namespace moat::egress
