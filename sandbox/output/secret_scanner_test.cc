#include "sandbox/output/secret_scanner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sandbox/testing/named_case.h"

namespace moat::sandbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// `n` characters that look like key material: letters of both cases and digits. The test keys
// are built from it so that none of them is a real credential.
std::string Body(size_t n) {
  constexpr absl::string_view kAlphabet = "aB3xY7kQ9mZ1pR5tW2";
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(kAlphabet[i % kAlphabet.size()]);
  return s;
}

const std::string kJwt =
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
const std::string kPem =
    "-----BEGIN RSA PRIVATE "
    "KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I\n"
    "2yPB0P9FrUzWJcT7VgE4mL0b+Q==\n-----END RSA PRIVATE KEY-----";
const std::string kAwsSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

using MaskCase = testing::TextCase;

class MaskSecretsTest : public ::testing::TestWithParam<MaskCase> {};

TEST_P(MaskSecretsTest, MasksExactlyTheSecret) {
  const MaskCase& c = GetParam();
  EXPECT_EQ(MaskSecrets(c.input).text, c.expected) << c.name;
}

// Each kind: the secret is replaced, the text around it is kept.
INSTANTIATE_TEST_SUITE_P(
    EveryKind, MaskSecretsTest,
    ::testing::Values(
        MaskCase{"openai", "key=sk-" + Body(48) + " ok", "key=[REDACTED:openai_key] ok"},
        MaskCase{"openai_project", "OPENAI_API_KEY=sk-proj-" + Body(30) + "_-" + Body(60),
                 "OPENAI_API_KEY=[REDACTED:openai_key]"},
        MaskCase{"anthropic", "\"sk-ant-api03-" + Body(93) + "-AA\"",
                 "\"[REDACTED:anthropic_key]\""},
        MaskCase{"pem_block", "before\n" + kPem + "\nafter",
                 "before\n[REDACTED:private_key]\nafter"},
        MaskCase{"pem_openssh",
                 "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n"
                 "-----END OPENSSH PRIVATE KEY-----\n",
                 "[REDACTED:private_key]\n"},
        MaskCase{"pem_plain_pkcs8",
                 "x -----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY----- y",
                 "x [REDACTED:private_key] y"},
        MaskCase{"pem_without_end", "a\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\nmore lines\n",
                 "a\n[REDACTED:private_key]"},
        MaskCase{"pem_end_of_another_label",
                 "-----BEGIN EC PRIVATE KEY-----\nAA\n-----END RSA PRIVATE KEY-----\nz",
                 "[REDACTED:private_key]"},
        MaskCase{"aws_access_key", "id: AKIAIOSFODNN7EXAMPLE.", "id: [REDACTED:aws_access_key]."},
        MaskCase{"aws_temporary_key", "ASIAY34FZKBOKMUTVV7A", "[REDACTED:aws_access_key]"},
        MaskCase{"aws_secret_ini", "aws_secret_access_key = " + kAwsSecret + "\n",
                 "aws_secret_access_key = [REDACTED:aws_secret_key]\n"},
        MaskCase{"aws_secret_env", "export AWS_SECRET_ACCESS_KEY='" + kAwsSecret + "'",
                 "export AWS_SECRET_ACCESS_KEY='[REDACTED:aws_secret_key]'"},
        MaskCase{"aws_secret_json", "{\"SecretAccessKey\": \"" + kAwsSecret + "\"}",
                 "{\"SecretAccessKey\": \"[REDACTED:aws_secret_key]\"}"},
        MaskCase{"github_classic", "ghp_" + Body(36), "[REDACTED:github_token]"},
        MaskCase{"github_oauth", "token gho_" + Body(36) + ";", "token [REDACTED:github_token];"},
        MaskCase{"github_user", "ghu_" + Body(36), "[REDACTED:github_token]"},
        MaskCase{"github_server", "ghs_" + Body(36), "[REDACTED:github_token]"},
        MaskCase{"github_refresh", "ghr_" + Body(36), "[REDACTED:github_token]"},
        MaskCase{"github_fine_grained", "github_pat_" + Body(22) + "_" + Body(59),
                 "[REDACTED:github_token]"},
        MaskCase{"slack_bot", "xoxb-123456789012-1234567890123-" + Body(24),
                 "[REDACTED:slack_token]"},
        MaskCase{"slack_user", "xoxp-1234-5678-" + Body(12), "[REDACTED:slack_token]"},
        MaskCase{"slack_app", "xoxa-2-" + Body(20), "[REDACTED:slack_token]"},
        MaskCase{"slack_refresh", "xoxr-9-" + Body(20), "[REDACTED:slack_token]"},
        MaskCase{"slack_session", "xoxs-9-" + Body(20), "[REDACTED:slack_token]"},
        MaskCase{"slack_webhook",
                 "POST https://hooks.slack.com/services/T00000000/B00000000/" + Body(24) + " ok",
                 "POST https://hooks.slack.com/services/[REDACTED:slack_webhook] ok"},
        MaskCase{"jwt", "token=" + kJwt + "&x=1", "token=[REDACTED:jwt]&x=1"},
        MaskCase{"google_api_key", "key=AIza" + Body(35), "key=[REDACTED:google_api_key]"},
        MaskCase{"stripe_secret", "sk_live_" + Body(24), "[REDACTED:stripe_key]"},
        MaskCase{"stripe_restricted", "rk_live_" + Body(24), "[REDACTED:stripe_key]"},
        MaskCase{"bearer_header", "Authorization: Bearer " + Body(40) + ".x-y_z\r\n",
                 "Authorization: Bearer [REDACTED:bearer_token]\r\n"},
        MaskCase{"bearer_lower_case_http2", "authorization: bearer " + Body(20),
                 "authorization: bearer [REDACTED:bearer_token]"},
        MaskCase{"bearer_json", "{\"Authorization\": \"Bearer " + Body(20) + "\"}",
                 "{\"Authorization\": \"Bearer [REDACTED:bearer_token]\"}"},
        MaskCase{"bearer_jwt_value", "curl -H 'Authorization: Bearer " + kJwt + "'",
                 "curl -H 'Authorization: Bearer [REDACTED:bearer_token]'"},
        MaskCase{"basic_header", "Proxy-Authorization: Basic dXNlcjpwYXNzd29yZA==",
                 "Proxy-Authorization: Basic [REDACTED:basic_auth]"},
        MaskCase{"url_password", "https://admin:hunter2@example.com/x",
                 "https://admin:[REDACTED:url_password]@example.com/x"},
        MaskCase{"url_password_with_at_and_port", "postgres://app:p@ss:w0rd@db:5432/app",
                 "postgres://app:[REDACTED:url_password]@db:5432/app"},
        MaskCase{"url_password_without_user", "redis://:s3cret@cache:6379",
                 "redis://:[REDACTED:url_password]@cache:6379"}),
    testing::NameOf<MaskCase>);

// Near misses: text that resembles a secret but is not one stays as it is.
INSTANTIATE_TEST_SUITE_P(
    NearMisses, MaskSecretsTest,
    ::testing::Values(
        MaskCase{"sk_short_word", "pip install sk-learn", "pip install sk-learn"},
        MaskCase{"ask_me", "ask-me-anything-about-secrets-2024",
                 "ask-me-anything-about-secrets-2024"},
        MaskCase{"risk_id", "risk-0123456789abcdefghijklmn", "risk-0123456789abcdefghijklmn"},
        MaskCase{"sk_long_words_no_digit", "sk-some-very-long-option-name-here",
                 "sk-some-very-long-option-name-here"},
        MaskCase{"sk_short_key", "sk-abc123", "sk-abc123"},
        MaskCase{"stripe_test_key", "sk_test_" + Body(24), "sk_test_" + Body(24)},
        MaskCase{"stripe_live_short", "sk_live_abc", "sk_live_abc"},
        MaskCase{"aws_14", "AKIAIOSFODNN7EXAMP", "AKIAIOSFODNN7EXAMP"},
        MaskCase{"aws_17", "AKIAIOSFODNN7EXAMPLE1", "AKIAIOSFODNN7EXAMPLE1"},
        MaskCase{"aws_glued", "XAKIAIOSFODNN7EXAMPLE", "XAKIAIOSFODNN7EXAMPLE"},
        MaskCase{"aws_lower", "AKIAiosfodnn7example", "AKIAiosfodnn7example"},
        MaskCase{"aws_secret_bare", kAwsSecret, kAwsSecret},
        MaskCase{"aws_secret_placeholder", "aws_secret_access_key = <your-secret-key>",
                 "aws_secret_access_key = <your-secret-key>"},
        MaskCase{"aws_secret_short", "aws_secret_access_key = None",
                 "aws_secret_access_key = None"},
        MaskCase{"aws_secret_no_assignment", "set aws_secret_access_key " + kAwsSecret,
                 "set aws_secret_access_key " + kAwsSecret},
        MaskCase{"github_short", "ghp_short", "ghp_short"},
        MaskCase{"github_unknown_prefix", "ghx_" + Body(36), "ghx_" + Body(36)},
        MaskCase{"github_glued", "aghp_" + Body(36), "aghp_" + Body(36)},
        MaskCase{"slack_words", "xoxo-hugs-and-kisses-forever", "xoxo-hugs-and-kisses-forever"},
        MaskCase{"slack_no_digit", "xoxb-abcdefghijklmnop", "xoxb-abcdefghijklmnop"},
        MaskCase{"slack_webhook_no_path", "https://hooks.slack.com/services/",
                 "https://hooks.slack.com/services/"},
        MaskCase{"base64", "SGVsbG8sIHdvcmxkISBUaGlzIGlzIGJhc2U2NA==",
                 "SGVsbG8sIHdvcmxkISBUaGlzIGlzIGJhc2U2NA=="},
        MaskCase{"base64_json_no_dots", "eyJmb28iOiJiYXIifQ==", "eyJmb28iOiJiYXIifQ=="},
        MaskCase{"jwt_two_parts", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0",
                 "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0"},
        MaskCase{"jwt_short_header", "eyJ.a.b", "eyJ.a.b"},
        MaskCase{"google_short", "AIzaShort", "AIzaShort"},
        MaskCase{"pem_certificate", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
                 "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"},
        MaskCase{"pem_public_key", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
                 "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----"},
        MaskCase{"bearer_placeholder", "Authorization: Bearer <token>",
                 "Authorization: Bearer <token>"},
        MaskCase{"bearer_variable", "Authorization: Bearer $TOKEN", "Authorization: Bearer $TOKEN"},
        MaskCase{"bearer_short", "Authorization: Bearer abc", "Authorization: Bearer abc"},
        MaskCase{"other_scheme", "Authorization: Negotiate YIIabcdefghijkl",
                 "Authorization: Negotiate YIIabcdefghijkl"},
        MaskCase{"authorization_in_prose", "the Authorization header carries a Bearer token",
                 "the Authorization header carries a Bearer token"},
        MaskCase{"url_port", "https://example.com:8443/path", "https://example.com:8443/path"},
        MaskCase{"url_user_only", "https://user@example.com/", "https://user@example.com/"},
        MaskCase{"ssh_user_and_port", "ssh://git@host:22/x", "ssh://git@host:22/x"},
        MaskCase{"scp_style", "git@github.com:org/repo.git", "git@github.com:org/repo.git"},
        MaskCase{"prose",
                 "Ask the task runner: skip eyes, AWS access, authorization: none. xox ghost\n",
                 "Ask the task runner: skip eyes, AWS access, authorization: none. xox ghost\n"}),
    testing::NameOf<MaskCase>);

TEST(FindSecretsTest, ReportsSpansInOrder) {
  const std::string text = "a AKIAIOSFODNN7EXAMPLE b https://u:pw@h c";
  std::vector<SecretSpan> spans = FindSecrets(text);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(text.substr(spans[0].begin, spans[0].end - spans[0].begin), "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(spans[0].kind, SecretKind::kAwsAccessKey);
  EXPECT_EQ(text.substr(spans[1].begin, spans[1].end - spans[1].begin), "pw");
  EXPECT_EQ(spans[1].kind, SecretKind::kUrlPassword);
}

TEST(MaskSecretsTest, CountsEveryMaskAndListsDistinctKindsSorted) {
  const std::string text =
      "ghp_" + Body(36) + " AKIAIOSFODNN7EXAMPLE ghp_" + Body(40) + " ASIAY34FZKBOKMUTVV7A " + kJwt;
  MaskedText masked = MaskSecrets(text);
  EXPECT_EQ(masked.text,
            "[REDACTED:github_token] [REDACTED:aws_access_key] [REDACTED:github_token] "
            "[REDACTED:aws_access_key] [REDACTED:jwt]");
  EXPECT_EQ(masked.secrets_masked, 5);
  EXPECT_THAT(masked.kinds, ElementsAre("aws_access_key", "github_token", "jwt"));
}

TEST(MaskSecretsTest, NothingFoundLeavesTextAndCountsZero) {
  MaskedText masked = MaskSecrets("hello world\n");
  EXPECT_EQ(masked.text, "hello world\n");
  EXPECT_EQ(masked.secrets_masked, 0);
  EXPECT_TRUE(masked.kinds.empty());
}

TEST(SecretKindNameTest, EveryKindHasADistinctName) {
  std::vector<std::string> names;
  for (int k = 0; k < kSecretKindCount; ++k) {
    names.emplace_back(SecretKindName(static_cast<SecretKind>(k)));
    EXPECT_NE(names.back(), "secret");
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
}

// A secret cut by truncation: from the first byte of secret material on, every cut of the text
// masks the visible part when the text is marked as cut.
struct CutCase {
  std::string name;
  std::string text;   // context, then a whole secret
  size_t span_begin;  // where the masked span starts
  size_t first_cut;   // the shortest cut that shows secret material
  size_t span_end;    // the cuts checked end here (the whole secret)
  std::string kind;
};

void PrintTo(const CutCase& c, std::ostream* os) { *os << c.name; }

std::vector<CutCase> CutCases() {
  std::vector<CutCase> cases;
  auto add = [&](std::string name, std::string context, std::string prefix, std::string rest,
                 std::string kind, std::string after = "") {
    const std::string text = context + prefix + rest + after;
    cases.push_back({std::move(name), text, context.size(), context.size() + prefix.size() + 1,
                     context.size() + prefix.size() + rest.size(), std::move(kind)});
  };
  add("openai", "key: ", "sk-", "proj-" + Body(40), "openai_key");
  add("anthropic", "key: ", "sk-ant-", "api03-" + Body(60), "anthropic_key");
  add("aws_access", "id=", "AKIA", "IOSFODNN7EXAMPLE", "aws_access_key");
  add("github", "x ", "ghp_", Body(36), "github_token");
  add("github_pat", "x ", "github_pat_", Body(82), "github_token");
  add("slack", "x ", "xoxb-", "1234-5678-" + Body(20), "slack_token");
  add("google", "x ", "AIza", Body(35), "google_api_key");
  add("stripe", "x ", "sk_live_", Body(24), "stripe_key");
  add("stripe_restricted", "x ", "rk_live_", Body(24), "stripe_key");
  add("jwt", "t=", "eyJ", kJwt.substr(3), "jwt");
  add("pem", "k:\n", "-----BEGIN ", kPem.substr(11), "private_key");
  add("aws_secret", "", "aws_secret_access_key = ", kAwsSecret, "aws_secret_key");
  add("bearer", "", "Authorization: Bearer ", Body(40), "bearer_token");
  add("basic", "", "authorization: basic ", "dXNlcjpwYXNzd29yZA==", "basic_auth");
  add("url_password", "", "url=https://admin:", "hunter2hunter2", "url_password",
      "@db.example.com/x");
  add("slack_webhook", "", "https://hooks.slack.com/services/", "T000/B000/" + Body(24),
      "slack_webhook");
  // For the context-key kinds the span is the value only: it starts after the prefix.
  for (CutCase& c : cases) {
    if (c.kind == "aws_secret_key" || c.kind == "bearer_token" || c.kind == "basic_auth" ||
        c.kind == "url_password" || c.kind == "slack_webhook") {
      c.span_begin = c.first_cut - 1;
    }
  }
  return cases;
}

class CutSecretTest : public ::testing::TestWithParam<CutCase> {};

TEST_P(CutSecretTest, VisiblePartIsMaskedAtEveryCut) {
  const CutCase& c = GetParam();
  const std::string want = c.text.substr(0, c.span_begin) + "[REDACTED:" + c.kind + "]";
  for (size_t len = c.first_cut; len <= c.span_end; ++len) {
    EXPECT_EQ(MaskSecrets(c.text.substr(0, len), /*text_was_cut=*/true).text, want)
        << c.name << " cut after " << len << " bytes: " << c.text.substr(0, len);
  }
}

TEST_P(CutSecretTest, ShortPieceIsNotASecretWhenTheTextWasNotCut) {
  const CutCase& c = GetParam();
  const std::string piece = c.text.substr(0, c.first_cut);
  EXPECT_EQ(MaskSecrets(piece, /*text_was_cut=*/false).text, piece);
}

TEST_P(CutSecretTest, PrefixAloneShowsNothingAndIsKept) {
  const CutCase& c = GetParam();
  const std::string prefix = c.text.substr(0, c.first_cut - 1);
  EXPECT_EQ(MaskSecrets(prefix, /*text_was_cut=*/true).text, prefix);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, CutSecretTest, ::testing::ValuesIn(CutCases()),
                         testing::NameOf<CutCase>);

TEST(CutSecretTest, OnlyTheTokenAtTheVeryEndIsTreatedAsCut) {
  // "sk-abc1" in the middle is complete (it is followed by a space): a short word, not a key.
  EXPECT_EQ(MaskSecrets("sk-abc1 and sk-abc2", /*text_was_cut=*/true).text,
            "sk-abc1 and [REDACTED:openai_key]");
  EXPECT_EQ(MaskSecrets("done\n", /*text_was_cut=*/true).text, "done\n");
}

// Inputs built to make a careless scanner go back over the same bytes again and again. A
// quadratic scan of 1 MiB takes minutes; these must take milliseconds.
TEST(FindSecretsTest, AdversarialInputsStayLinear) {
  const std::vector<std::string> units = {"sk-",
                                          "eyJ-",
                                          "eyJ.",
                                          "AKIA",
                                          "ghp_",
                                          "xoxb-",
                                          "://",
                                          "a://b:",
                                          "https://a:b@",
                                          "-----BEGIN PRIVATE KEY-----\n",
                                          "-----BEGIN ",
                                          "-----",
                                          "aws_secret_access_key=",
                                          "Authorization: Bearer ",
                                          "authorization:",
                                          "secret_access_key: ",
                                          "AIza",
                                          "github_pat_",
                                          "a",
                                          "A",
                                          "-",
                                          ":",
                                          "@"};
  for (const std::string& unit : units) {
    std::string text;
    while (text.size() < (1u << 20)) text += unit;
    for (bool cut : {false, true}) {
      const auto start = std::chrono::steady_clock::now();
      MaskedText masked = MaskSecrets(text, cut);
      const auto elapsed = std::chrono::steady_clock::now() - start;
      EXPECT_LT(elapsed, std::chrono::milliseconds(500)) << "unit \"" << unit << "\"";
      EXPECT_FALSE(masked.text.empty());
    }
  }
}

TEST(FindSecretsTest, KeyInsideLongTextIsFound) {
  std::string text(1 << 20, 'x');
  text.replace(text.size() / 2, 1, " AKIAIOSFODNN7EXAMPLE ");
  MaskedText masked = MaskSecrets(text);
  EXPECT_EQ(masked.secrets_masked, 1);
  EXPECT_THAT(masked.text, Not(HasSubstr("AKIA")));
}

}  // namespace
}  // namespace moat::sandbox
