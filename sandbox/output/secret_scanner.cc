#include "sandbox/output/secret_scanner.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace moat::sandbox {
namespace {

// Byte classes as lookup tables: the scanners only ever ask "is this byte in the class".
using CharClass = std::array<bool, 256>;

constexpr CharClass MakeClass(bool lower, bool upper, bool digits, std::string_view extra) {
  CharClass t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = (lower && c >= 'a' && c <= 'z') || (upper && c >= 'A' && c <= 'Z') ||
           (digits && c >= '0' && c <= '9');
  }
  for (char c : extra) t[static_cast<unsigned char>(c)] = true;
  return t;
}

constexpr CharClass kAlnum = MakeClass(true, true, true, "");
constexpr CharClass kUpperAlnum = MakeClass(false, true, true, "");
constexpr CharClass kWordDash = MakeClass(true, true, true, "_-");  // also base64url
constexpr CharClass kWordDashDot = MakeClass(true, true, true, "_-.");
constexpr CharClass kAlnumUnderscore = MakeClass(true, true, true, "_");
constexpr CharClass kAlnumDash = MakeClass(true, true, true, "-");
constexpr CharClass kToken68 = MakeClass(true, true, true, "-._~+/=");  // RFC 7235 credentials
constexpr CharClass kAwsSecretChars = MakeClass(true, true, true, "/+=");
constexpr CharClass kPemLabel = MakeClass(false, true, true, " ");
constexpr CharClass kWebhookPath = MakeClass(true, true, true, "/_-");
constexpr CharClass kDigit = MakeClass(false, false, true, "");
constexpr CharClass kLetter = MakeClass(true, true, false, "");
constexpr CharClass kDash = MakeClass(false, false, false, "-");
constexpr CharClass kBlank = MakeClass(false, false, false, " \t");

// Bytes that end the authority part of a URL (RFC 3986 3.2, plus what delimits a URL in prose,
// JSON or a shell line): path, query and fragment starts, spaces, controls, quotes, brackets.
constexpr CharClass kAuthorityEnd = [] {
  CharClass t{};
  for (int c = 0; c < 256; ++c) t[c] = c <= 0x20 || c >= 0x7F;
  for (char c : std::string_view("/?#\"'<>`\\")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

// The first byte of everything the scanner looks for; all other bytes are skipped at once.
constexpr CharClass kTrigger = MakeClass(false, false, false, "sSraAgxe:-");

// One left-to-right pass: at each trigger byte, the matchers for that byte look for a secret that
// starts there (or, for key = value forms and URLs, whose value follows). A match moves the scan
// past it; matchers only look forward from their trigger and stop at the end of their token, so
// the pass is linear.
class Scanner {
 public:
  Scanner(absl::string_view text, bool cut) : s_(text), n_(text.size()), cut_(cut) {}

  std::vector<SecretSpan> Run() {
    std::vector<SecretSpan> spans;
    size_t i = 0;
    while (i < n_) {
      while (i < n_ && !kTrigger[At(i)]) ++i;
      if (i == n_) break;
      // Every letter trigger needs a word start; most letters are inside words.
      if (i > 0 && kAlnum[At(i)] && kAlnum[At(i - 1)]) {
        ++i;
        continue;
      }
      if (std::optional<SecretSpan> m = MatchAt(i)) {
        spans.push_back(*m);
        i = m->end;  // spans start at or after `i` and are never empty, so this moves forward
      } else {
        ++i;
      }
    }
    return spans;
  }

 private:
  using Match = std::optional<SecretSpan>;

  unsigned char At(size_t i) const { return static_cast<unsigned char>(s_[i]); }
  static bool OneOf(unsigned char c, absl::string_view set) {
    return set.find(static_cast<char>(c)) != absl::string_view::npos;
  }
  bool PrevIn(size_t i, const CharClass& cls) const { return i > 0 && cls[At(i - 1)]; }
  bool StartsWith(size_t i, absl::string_view lit) const {
    return n_ - i >= lit.size() && std::memcmp(s_.data() + i, lit.data(), lit.size()) == 0;
  }
  // `lower` must be lower case ASCII.
  bool StartsWithIgnoreCase(size_t i, absl::string_view lower) const {
    if (n_ - i < lower.size()) return false;
    for (size_t k = 0; k < lower.size(); ++k) {
      unsigned char c = At(i + k);
      if (c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
      if (c != static_cast<unsigned char>(lower[k])) return false;
    }
    return true;
  }
  size_t RunEnd(size_t i, const CharClass& cls, size_t limit = SIZE_MAX) const {
    const size_t stop = std::min(n_, limit);
    while (i < stop && cls[At(i)]) ++i;
    return i;
  }
  bool HasByte(size_t begin, size_t end, const CharClass& cls) const {
    for (size_t k = begin; k < end; ++k) {
      if (cls[At(k)]) return true;
    }
    return false;
  }
  // The text was cut and a token body of `len` visible bytes runs into the cut: whatever its
  // length, it is the start of a secret whose rest is gone.
  bool CutAtEnd(size_t len, size_t end) const { return cut_ && end == n_ && len > 0; }
  // A body long enough to be a whole secret, or the visible part of a cut one.
  bool LongEnough(size_t len, size_t end, size_t min_len) const {
    return len >= min_len || CutAtEnd(len, end);
  }

  Match MatchAt(size_t i) {
    switch (At(i)) {
      case 's':
        if (Match m = OpenAiKey(i)) return m;
        if (Match m = PrefixToken(i, "sk_live_", kAlnum, 16, SecretKind::kStripeKey)) return m;
        return AwsSecretValue(i);
      case 'r':
        return PrefixToken(i, "rk_live_", kAlnum, 16, SecretKind::kStripeKey);
      case 'S':
        return AwsSecretValue(i);
      case 'A':
        if (Match m = AwsAccessKey(i)) return m;
        if (Match m = PrefixToken(i, "AIza", kWordDash, 35, SecretKind::kGoogleApiKey)) return m;
        [[fallthrough]];
      case 'a':
        if (Match m = AwsSecretValue(i)) return m;
        return AuthorizationValue(i);
      case 'g':
        return GitHubToken(i);
      case 'x':
        return SlackToken(i);
      case 'e':
        return Jwt(i);
      case ':':
        return UrlCredentials(i);
      case '-':
        return PrivateKey(i);
      default:
        return std::nullopt;
    }
  }

  // `prefix` then a run of `body` bytes. Prefix tokens must not follow [A-Za-z0-9_-]: that keeps
  // "ask-..." from being an "sk-" key, and means no run of such bytes is scanned twice.
  Match PrefixToken(size_t i, absl::string_view prefix, const CharClass& body, size_t min_len,
                    SecretKind kind) const {
    if (PrevIn(i, kWordDash) || !StartsWith(i, prefix)) return std::nullopt;
    const size_t begin = i + prefix.size();
    const size_t end = RunEnd(begin, body);
    if (!LongEnough(end - begin, end, min_len)) return std::nullopt;
    return SecretSpan{i, end, kind};
  }

  // OpenAI (sk-..., sk-proj-...) and Anthropic (sk-ant-...) keys. The body must hold a digit and
  // a letter so that long kebab-case words ("sk-some-long-option-name-here") stay visible.
  Match OpenAiKey(size_t i) const {
    if (PrevIn(i, kWordDash) || !StartsWith(i, "sk-")) return std::nullopt;
    const size_t begin = i + 3;
    const size_t end = RunEnd(begin, kWordDash);
    const size_t len = end - begin;
    const bool anthropic = StartsWith(begin, "ant-");
    const bool whole = len >= 20 && HasByte(begin, end, kDigit) && HasByte(begin, end, kLetter);
    if (!whole && !CutAtEnd(anthropic ? len - 4 : len, end)) return std::nullopt;
    return SecretSpan{i, end, anthropic ? SecretKind::kAnthropicKey : SecretKind::kOpenAiKey};
  }

  // AKIA (long-term) or ASIA (temporary) and exactly 16 more of [A-Z0-9], as a whole word.
  Match AwsAccessKey(size_t i) const {
    if (PrevIn(i, kWordDash) || !(StartsWith(i, "AKIA") || StartsWith(i, "ASIA"))) {
      return std::nullopt;
    }
    const size_t begin = i + 4;
    const size_t end = RunEnd(begin, kUpperAlnum, begin + 17);
    const size_t len = end - begin;
    const bool whole = len == 16 && (end == n_ || !kAlnum[At(end)]);
    if (!whole && !(len <= 16 && CutAtEnd(len, end))) return std::nullopt;
    return SecretSpan{i, end, SecretKind::kAwsAccessKey};
  }

  // ghp_ (personal), gho_ (OAuth), ghu_ (user-to-server), ghs_ (server), ghr_ (refresh), and
  // fine-grained github_pat_.
  Match GitHubToken(size_t i) const {
    if (n_ - i >= 4 && At(i + 1) == 'h' && OneOf(At(i + 2), "pousr") && At(i + 3) == '_') {
      return PrefixToken(i, s_.substr(i, 4), kAlnum, 30, SecretKind::kGitHubToken);
    }
    return PrefixToken(i, "github_pat_", kAlnumUnderscore, 30, SecretKind::kGitHubToken);
  }

  // xoxb- (bot), xoxp- (user), xoxa- (app), xoxr- (refresh), xoxs- (session). Real tokens carry
  // numeric team and user ids, so a digit is required.
  Match SlackToken(size_t i) const {
    if (!StartsWith(i, "xox") || n_ - i < 5 || !OneOf(At(i + 3), "bpars") || At(i + 4) != '-') {
      return std::nullopt;
    }
    Match m = PrefixToken(i, s_.substr(i, 5), kAlnumDash, 10, SecretKind::kSlackToken);
    if (m && !HasByte(i + 5, m->end, kDigit) && !CutAtEnd(m->end - i - 5, m->end)) {
      return std::nullopt;
    }
    return m;
  }

  // header.payload.signature, each base64url, the header a JSON object ("eyJ" is '{"').
  Match Jwt(size_t i) const {
    if (PrevIn(i, kWordDashDot) || !StartsWith(i, "eyJ")) return std::nullopt;
    const size_t header_end = RunEnd(i, kWordDash);
    if (header_end - i >= 10 && header_end < n_ && At(header_end) == '.') {
      const size_t payload_end = RunEnd(header_end + 1, kWordDash);
      if (payload_end > header_end + 1 && payload_end < n_ && At(payload_end) == '.') {
        const size_t signature_end = RunEnd(payload_end + 1, kWordDash);
        if (signature_end > payload_end + 1) return SecretSpan{i, signature_end, SecretKind::kJwt};
      }
    }
    // Cut: whatever part of a token starting with "eyJ" is visible.
    const size_t end = RunEnd(i, kWordDashDot);
    if (CutAtEnd(end - i - 3, end)) return SecretSpan{i, end, SecretKind::kJwt};
    return std::nullopt;
  }

  // A PEM private key block, BEGIN to the matching END; without an END, to the end of the text.
  Match PrivateKey(size_t i) const {
    constexpr absl::string_view kBegin = "-----BEGIN ";
    constexpr absl::string_view kDashes = "-----";
    constexpr size_t kMaxLabel = 64;  // "ENCRYPTED PRIVATE KEY", "OPENSSH PRIVATE KEY", ...
    if (!StartsWith(i, kBegin)) return std::nullopt;
    const size_t label = i + kBegin.size();
    const size_t label_end = RunEnd(label, kPemLabel, label + kMaxLabel);
    if (label_end == n_) {  // cut inside the label: it may well have been a private key
      if (CutAtEnd(label_end - label, label_end)) return SecretSpan{i, n_, SecretKind::kPrivateKey};
      return std::nullopt;
    }
    const absl::string_view name = s_.substr(label, label_end - label);
    if (name.find("PRIVATE KEY") == absl::string_view::npos) return std::nullopt;
    if (!StartsWith(label_end, kDashes)) {
      const bool cut_in_dashes = cut_ && RunEnd(label_end, kDash) == n_;
      if (cut_in_dashes) return SecretSpan{i, n_, SecretKind::kPrivateKey};
      return std::nullopt;
    }
    const std::string end_line = absl::StrCat("-----END ", name, kDashes);
    const size_t from = label_end + kDashes.size();
    const void* found = memmem(s_.data() + from, n_ - from, end_line.data(), end_line.size());
    const size_t end =
        found == nullptr ? n_ : static_cast<const char*>(found) - s_.data() + end_line.size();
    return SecretSpan{i, end, SecretKind::kPrivateKey};
  }

  // At "://": a password in the userinfo (scheme://user:password@host), or a Slack webhook URL.
  // The authority ends at the first '/', so scans from two "://" never overlap.
  Match UrlCredentials(size_t i) const {
    if (!StartsWith(i, "://") || !PrevIn(i, kAlnum)) return std::nullopt;
    const size_t authority = i + 3;
    size_t colon = absl::string_view::npos;
    size_t at = absl::string_view::npos;  // the last '@', as browsers take it
    size_t j = authority;
    for (; j < n_ && !kAuthorityEnd[At(j)]; ++j) {
      if (At(j) == '@') at = j;
      if (At(j) == ':' && colon == absl::string_view::npos) colon = j;
    }
    if (at != absl::string_view::npos) {
      if (colon < at && colon + 1 < at) return SecretSpan{colon + 1, at, SecretKind::kUrlPassword};
      return std::nullopt;
    }
    // Cut before the '@' arrived: "https://user:pa" may be a password; mask the visible part.
    if (colon != absl::string_view::npos && CutAtEnd(j - colon - 1, j)) {
      return SecretSpan{colon + 1, j, SecretKind::kUrlPassword};
    }
    constexpr absl::string_view kServices = "/services/";
    if (s_.substr(authority, j - authority) == "hooks.slack.com" && StartsWith(j, kServices)) {
      const size_t begin = j + kServices.size();
      const size_t end = RunEnd(begin, kWebhookPath);
      if (LongEnough(end - begin, end, 10))
        return SecretSpan{begin, end, SecretKind::kSlackWebhook};
    }
    return std::nullopt;
  }

  // After a key name ending at `j`: quotes, blanks and at least one ':' or '=' (8 bytes at most),
  // as in `key = v`, `key: v`, `"key": "v"`, `KEY='v'`. Returns where the value starts.
  std::optional<size_t> SkipAssignment(size_t j) const {
    const size_t stop = std::min(n_, j + 8);
    bool assigned = false;
    for (; j < stop; ++j) {
      const unsigned char c = At(j);
      if (c == ':' || c == '=') {
        assigned = true;
      } else if (c != ' ' && c != '\t' && c != '"' && c != '\'') {
        break;
      }
    }
    if (!assigned) return std::nullopt;
    return j;
  }

  // [aws_]secret[_-]access[_-]key = <value>, any case; also SecretAccessKey as in AWS JSON.
  Match AwsSecretValue(size_t i) const {
    if (PrevIn(i, kAlnum)) return std::nullopt;
    size_t j = i;
    auto separator = [&] {
      if (j < n_ && (At(j) == '_' || At(j) == '-')) ++j;
    };
    if (StartsWithIgnoreCase(j, "aws")) {
      j += 3;
      separator();
    }
    for (absl::string_view word : {"secret", "access", "key"}) {
      if (!StartsWithIgnoreCase(j, word)) return std::nullopt;
      j += word.size();
      if (word != "key") separator();
    }
    if (j < n_ && kAlnum[At(j)]) return std::nullopt;  // e.g. "...KeyId"
    const std::optional<size_t> value = SkipAssignment(j);
    if (!value) return std::nullopt;
    const size_t end = RunEnd(*value, kAwsSecretChars);
    if (!LongEnough(end - *value, end, 16)) return std::nullopt;
    return SecretSpan{*value, end, SecretKind::kAwsSecretKey};
  }

  // Authorization: Bearer <token> / Basic <base64>, any case, as a header, in JSON or in code.
  Match AuthorizationValue(size_t i) const {
    constexpr absl::string_view kName = "authorization";
    if (PrevIn(i, kAlnum) || !StartsWithIgnoreCase(i, kName)) return std::nullopt;
    const std::optional<size_t> scheme = SkipAssignment(i + kName.size());
    if (!scheme) return std::nullopt;
    size_t j = *scheme;
    SecretKind kind;
    if (StartsWithIgnoreCase(j, "bearer")) {
      kind = SecretKind::kBearerToken;
      j += 6;
    } else if (StartsWithIgnoreCase(j, "basic")) {
      kind = SecretKind::kBasicAuth;
      j += 5;
    } else {
      return std::nullopt;
    }
    const size_t begin = RunEnd(j, kBlank, j + 4);
    if (begin == j) return std::nullopt;  // "Bearerish", not a scheme
    const size_t end = RunEnd(begin, kToken68);
    if (!LongEnough(end - begin, end, 8)) return std::nullopt;
    return SecretSpan{begin, end, kind};
  }

  const absl::string_view s_;
  const size_t n_;
  const bool cut_;
};

}  // namespace

absl::string_view SecretKindName(SecretKind kind) {
  switch (kind) {
    case SecretKind::kOpenAiKey:
      return "openai_key";
    case SecretKind::kAnthropicKey:
      return "anthropic_key";
    case SecretKind::kStripeKey:
      return "stripe_key";
    case SecretKind::kAwsAccessKey:
      return "aws_access_key";
    case SecretKind::kAwsSecretKey:
      return "aws_secret_key";
    case SecretKind::kGoogleApiKey:
      return "google_api_key";
    case SecretKind::kGitHubToken:
      return "github_token";
    case SecretKind::kSlackToken:
      return "slack_token";
    case SecretKind::kSlackWebhook:
      return "slack_webhook";
    case SecretKind::kJwt:
      return "jwt";
    case SecretKind::kPrivateKey:
      return "private_key";
    case SecretKind::kBearerToken:
      return "bearer_token";
    case SecretKind::kBasicAuth:
      return "basic_auth";
    case SecretKind::kUrlPassword:
      return "url_password";
  }
  return "secret";
}

std::vector<SecretSpan> FindSecrets(absl::string_view text, bool text_was_cut) {
  return Scanner(text, text_was_cut).Run();
}

MaskedText MaskSecrets(absl::string_view text, bool text_was_cut) {
  MaskedText result;
  const std::vector<SecretSpan> spans = FindSecrets(text, text_was_cut);
  if (spans.empty()) {
    result.text = std::string(text);
    return result;
  }
  std::array<bool, kSecretKindCount> seen{};
  result.text.reserve(text.size());
  size_t pos = 0;
  for (const SecretSpan& span : spans) {
    absl::StrAppend(&result.text, text.substr(pos, span.begin - pos),
                    "[REDACTED:", SecretKindName(span.kind), "]");
    pos = span.end;
    seen[static_cast<int>(span.kind)] = true;
  }
  result.text.append(text.data() + pos, text.size() - pos);
  result.secrets_masked = static_cast<int>(spans.size());
  for (int k = 0; k < kSecretKindCount; ++k) {
    if (seen[k]) result.kinds.emplace_back(SecretKindName(static_cast<SecretKind>(k)));
  }
  std::sort(result.kinds.begin(), result.kinds.end());
  return result;
}

}  // namespace moat::sandbox
