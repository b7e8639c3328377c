// Secret masking for sandbox output: finds credentials in text with small linear scanners (no
// std::regex: it is slow and overflows the stack on megabyte inputs) and replaces them with
// "[REDACTED:<kind>]".
//
// What is found (kind name in brackets). Prefix tokens must not follow a byte of [A-Za-z0-9_-]
// (a JWT not a '.' either), so "ask-me" is not an "sk-" key and no run of token bytes is scanned
// twice: every scanner is linear, also on adversarial input.
//   sk-<20+ of [A-Za-z0-9_-], with a digit and a letter>   [openai_key], sk-ant-... [anthropic_key]
//   sk_live_ / rk_live_ <16+ alnum>                         [stripe_key]
//   AKIA / ASIA <exactly 16 of [A-Z0-9]>                    [aws_access_key]
//   AIza <35+ of [A-Za-z0-9_-]>                             [google_api_key]
//   ghp_ gho_ ghu_ ghs_ ghr_ <30+ alnum>, github_pat_ <30+ of [A-Za-z0-9_]>   [github_token]
//   xoxb- xoxp- xoxa- xoxr- xoxs- <10+ of [A-Za-z0-9-], with a digit>         [slack_token]
//   eyJ<header, 10+>.<payload>.<signature>, base64url       [jwt]
//   -----BEGIN <label with PRIVATE KEY>----- up to the matching -----END <label>-----, or to the
//     end of the text when there is no END                  [private_key]
// Values after a key name (the name stays visible, only the value is replaced):
//   [aws_]secret[_-]access[_-]key, any case, then = or : (quotes and spaces allowed), then
//     16+ of [A-Za-z0-9/+=]                                 [aws_secret_key]
//   authorization, any case, then = or :, then Bearer|Basic (any case) and 8+ token68 chars
//                                                           [bearer_token] [basic_auth]
//   scheme://user:<password>@host                           [url_password]
//   https://hooks.slack.com/services/<10+ of [A-Za-z0-9/_-]> [slack_webhook]
//
// Truncated text: when `text_was_cut`, a secret-looking token that runs to the very end of the
// text is reported even when it is too short to be a whole secret, as long as its identifying
// prefix is complete and at least one character of the secret part is visible ("sk-pro",
// "AKIAIOS", "Bearer ab", "https://u:pa", "-----BEGIN RSA PRIV"): the rest was cut off, and the
// visible part must not leak. This errs on the safe side: a cut "https://host:80" loses its port,
// a cut "-----BEGIN CERT" is masked.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace moat::sandbox {

enum class SecretKind {
  kOpenAiKey,
  kAnthropicKey,
  kStripeKey,
  kAwsAccessKey,
  kAwsSecretKey,
  kGoogleApiKey,
  kGitHubToken,
  kSlackToken,
  kSlackWebhook,
  kJwt,
  kPrivateKey,
  kBearerToken,
  kBasicAuth,
  kUrlPassword,
};
inline constexpr int kSecretKindCount = static_cast<int>(SecretKind::kUrlPassword) + 1;

// The name used in "[REDACTED:<name>]" and in SanitizedText::secret_kinds, e.g. "aws_access_key".
absl::string_view SecretKindName(SecretKind kind);

// A secret found in a text: bytes [begin, end).
struct SecretSpan {
  size_t begin = 0;
  size_t end = 0;
  SecretKind kind = SecretKind::kOpenAiKey;
};

// Finds secrets in `text`, left to right, in one pass. Spans are sorted and do not overlap.
std::vector<SecretSpan> FindSecrets(absl::string_view text, bool text_was_cut = false);

struct MaskedText {
  std::string text;
  int secrets_masked = 0;
  std::vector<std::string> kinds;  // distinct kind names, sorted
};

// Replaces every span FindSecrets reports with "[REDACTED:<kind>]".
MaskedText MaskSecrets(absl::string_view text, bool text_was_cut = false);

}  // namespace moat::sandbox
