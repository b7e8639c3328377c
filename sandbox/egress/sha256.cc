#include "sandbox/egress/sha256.h"

#include <cstdlib>

#include "absl/strings/escaping.h"

namespace moat::egress {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Both fail only when libcrypto cannot allocate a few hundred bytes; nothing sensible remains.
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(absl::string_view data) {
  if (data.empty()) return;
  EVP_DigestUpdate(ctx_, data.data(), data.size());
  bytes_ += data.size();
}

std::string Sha256::HexPrefix() {
  if (bytes_ == 0) return "";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx_, digest, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length))
      .substr(0, 16);
}

}  // namespace moat::egress
