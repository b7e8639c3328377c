#include "util/join_auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace moat {
namespace {

std::string HexHmac(absl::string_view key, absl::string_view message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length));
}

}  // namespace

std::string JoinAgentProof(absl::string_view join_token, absl::string_view node_name,
                           absl::string_view nonce, int64_t unix_seconds) {
  return HexHmac(join_token,
                 absl::StrCat("moat-join-agent\n", node_name, "\n", nonce, "\n", unix_seconds));
}

std::string JoinControllerProof(absl::string_view join_token, absl::string_view node_name,
                                absl::string_view nonce) {
  return HexHmac(join_token, absl::StrCat("moat-join-controller\n", node_name, "\n", nonce));
}

}  // namespace moat
