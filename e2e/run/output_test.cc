// Output cleaning with --json: what the command prints reaches the caller (often a model) only as
// bounded, printable, valid UTF-8 text with secrets masked, whatever tricks the command plays:
// escape sequences, NUL, binary, floods, secrets split across writes or hidden by escapes.
// Also the exit status contract without --json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr size_t kCap = 1 << 20;

// Fake credentials of each kind the sanitizer must mask (none of them is real).
struct FakeSecret {
  const char* kind;
  const char* text;
};
constexpr FakeSecret kSecrets[] = {
    {"openai_key", "sk-proj-4f9Qx2LmN8vR3tY6wZ1aB5cD7eF0gH2j"},
    {"aws_access_key", "AKIAIOSFODNN7EXAMPLE"},
    {"github_token", "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"},
    {"jwt",
     "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJtb2F0LWUyZSIsIm5hbWUiOiJ0ZXN0In0."
     "c2lnbmF0dXJlLW9mLXRoZS1tb2F0LWUyZS10ZXN0"},
    {"private_key",
     "-----BEGIN RSA PRIVATE "
     "KEY-----\nMIIEowIBAAKCAQEAmoatE2eFakeKeyMaterialOnlyForTests0123456789\n"
     "-----END RSA PRIVATE KEY-----"},
};

TEST_F(E2eTest, EscapeSequencesAndControlBytesAreStripped) {
  const char* script =
      "printf '\\033[31mred\\033[0m \\033]0;title-pwned\\007\\033]52;c;cHduZWQ=\\007"
      "\\033[2J\\033[10;10Hmoved\\033P+q544e\\033\\\\ bell\\007 nul\\000byte del\\177 "
      "back\\bspace\\r\\nend\\n'\n"
      "printf 'err\\033[1mbold\\033[0m\\n' >&2\n";
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  for (const char* stream : {"stdout", "stderr"}) {
    std::string text = r[stream];
    for (char bad : {'\033', '\007', '\0', '\177', '\b', '\r'}) {
      EXPECT_EQ(text.find(bad), std::string::npos)
          << stream << " contains byte " << static_cast<int>(bad) << ": " << Describe(r);
    }
    EXPECT_THAT(text, Not(HasSubstr("title-pwned"))) << Describe(r);
    EXPECT_THAT(text, Not(HasSubstr("cHduZWQ="))) << Describe(r);
  }
  std::string out = r["stdout"];
  for (const char* kept : {"red", "moved", "bell", "nulbyte", "end\n"}) {
    EXPECT_THAT(out, HasSubstr(kept)) << Describe(r);
  }
  EXPECT_EQ(r["stderr"], "errbold\n") << Describe(r);
}

TEST_F(E2eTest, BinaryOutputIsReplacedAndInvalidUtf8Repaired) {
  nlohmann::json bin = RunJson({}, Sh("head -c 65536 /dev/urandom"));
  ASSERT_TRUE(bin.is_object());
  std::string out = bin["stdout"];
  EXPECT_THAT(out, HasSubstr("binary output omitted")) << out.substr(0, 200);
  EXPECT_LT(out.size(), 200u);

  // Mostly text with a few invalid bytes: kept as text, the bad bytes replaced (U+FFFD).
  nlohmann::json text = RunJson({}, Sh("printf 'caf\\351 ok \\377\\376 fine\\n'"));
  ASSERT_TRUE(text.is_object());  // RunJson parsed it: valid JSON, valid UTF-8
  std::string t = text["stdout"];
  EXPECT_THAT(t, HasSubstr("ok")) << t;
  EXPECT_THAT(t, HasSubstr("fine")) << t;
  EXPECT_THAT(t, HasSubstr("\xEF\xBF\xBD")) << t;
}

TEST_F(E2eTest, OutputIsCappedAtOneMebibyte) {
  MoatResult raw;
  nlohmann::json r = RunJson({},
                             Sh("yes 'line of output' | head -c 3000000; "
                                "yes 'err line' | head -c 2000000 >&2"),
                             {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_LE(r["stdout"].get<std::string>().size(), kCap);
  EXPECT_GE(r["stdout"].get<std::string>().size(), kCap - 64);
  EXPECT_EQ(r["stdout_truncated"], true);
  EXPECT_LE(r["stderr"].get<std::string>().size(), kCap);
  EXPECT_EQ(r["stderr_truncated"], true);

  nlohmann::json small = RunJson({}, Sh("echo small"));
  ASSERT_TRUE(small.is_object());
  EXPECT_EQ(small["stdout_truncated"], false);
}

// A flood must neither exhaust moat's memory nor make it slow.
TEST_F(E2eTest, OutputFloodKeepsMoatSmall) {
  MoatResult raw;
  nlohmann::json r = RunJson({"--wall-timeout", "30s"},
                             Sh("head -c 200000000 /dev/zero | tr '\\0' 'a'"), {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["stdout_truncated"], true);
  EXPECT_LE(r["stdout"].get<std::string>().size(), kCap);
  EXPECT_LT(raw.usage.ru_maxrss, 48 * 1024) << "moat's peak RSS in KiB";
  EXPECT_LT(raw.seconds, Scaled(20));
}

TEST_F(E2eTest, SecretsAreMasked) {
  std::string script;
  for (const FakeSecret& s : kSecrets) {
    absl::StrAppend(&script, "printf '%s\\n' '", s.text, "'\n");
    absl::StrAppend(&script, "printf '%s\\n' '", s.text, "' >&2\n");
  }
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  for (const char* stream : {"stdout", "stderr"}) {
    std::string text = r[stream];
    for (const FakeSecret& s : kSecrets) {
      std::string body = std::string(s.text).substr(0, 40);
      if (std::string(s.kind) == "private_key") body = "MIIEowIBAAKCAQEAmoat";
      EXPECT_THAT(text, Not(HasSubstr(body)))
          << "ATTACK SUCCEEDED: " << s.kind << " in " << stream << "\n"
          << text;
      EXPECT_THAT(text, HasSubstr(absl::StrCat("[REDACTED:", s.kind, "]"))) << stream << "\n"
                                                                            << text;
    }
  }
}

TEST_F(E2eTest, SecretsSplitAcrossWritesOrHiddenByEscapesAreMasked) {
  const char* script =
      // Two writes with a pause, so the key crosses a pipe read.
      "printf 'key=AKIAIOSF'; sleep 0.2; printf 'ODNN7EXAMPLE\\n'\n"
      // An escape sequence in the middle, removed by cleaning before the scan.
      "printf 'gh=ghp_a1B2c3D4e5F6g7\\033[0mH8i9J0k1L2m3N4o5P6q7R8\\n'\n"
      // NUL bytes inside.
      "printf 'sk-proj-4f9Qx2LmN8\\000vR3tY6wZ1aB5cD7eF0gH2j\\n'\n";
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, Not(HasSubstr("AKIAIOSFODNN7EXAMPLE"))) << "ATTACK SUCCEEDED\n" << out;
  EXPECT_THAT(out, Not(HasSubstr("H8i9J0k1L2m3N4o5P6q7R8"))) << "ATTACK SUCCEEDED\n" << out;
  EXPECT_THAT(out, Not(HasSubstr("vR3tY6wZ1aB5cD7eF0gH2j"))) << "ATTACK SUCCEEDED\n" << out;
  EXPECT_THAT(out, HasSubstr("[REDACTED:aws_access_key]")) << out;
  EXPECT_THAT(out, HasSubstr("[REDACTED:github_token]")) << out;
  EXPECT_THAT(out, HasSubstr("[REDACTED:openai_key]")) << out;
}

TEST_F(E2eTest, SecretCutByTheCapIsMasked) {
  // Filler up to 8 bytes before the cap (ending in a newline, so the key stands on its own), then
  // a key: the cap cuts it to "AKIAIOSF".
  std::string script = absl::StrCat("yes 'filler line' | head -c ", kCap - 9,
                                    "; echo; printf 'AKIAIOSFODNN7EXAMPLE\\n'; echo more");
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_EQ(r["stdout_truncated"], true);
  EXPECT_THAT(out.substr(out.size() > 64 ? out.size() - 64 : 0), Not(HasSubstr("AKIAIOS")))
      << "ATTACK SUCCEEDED: the visible part of a cut key leaked: "
      << out.substr(out.size() > 64 ? out.size() - 64 : 0);
}

TEST_F(E2eTest, ExitStatusWithoutJson) {
  EXPECT_EQ(RunPlain({}, Sh("exit 3")).exit_code, 3);
  EXPECT_EQ(RunPlain({}, Sh("kill -9 $$")).exit_code, 128 + SIGKILL);
  EXPECT_EQ(RunPlain({}, Sh("kill -TERM $$")).exit_code, 128 + SIGTERM);
  MoatResult missing = RunPlain({}, {"/nonexistent/moat-e2e-command"});
  EXPECT_EQ(missing.exit_code, 127) << missing.err;
  EXPECT_THAT(missing.err, HasSubstr("moat-e2e-command")) << missing.err;
  nlohmann::json j = RunJson({}, Sh("exit 3"));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["status"], "exited");
  EXPECT_EQ(j["exit_code"], 3);
}

}  // namespace
}  // namespace moat::e2e
