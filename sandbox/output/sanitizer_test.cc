#include "sandbox/output/sanitizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sandbox/testing/named_case.h"

namespace moat::sandbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::string_literals;

const std::string kFffd = "\xEF\xBF\xBD";

// Cleaning alone: the short inputs below are mostly controls, which the printable-ratio check
// would rightly call binary.
SanitizeOptions NoRatio() {
  SanitizeOptions options;
  options.min_printable_ratio = 0.0;
  return options;
}

std::string Clean(absl::string_view raw) { return SanitizeOutput(raw, false, NoRatio()).text; }

// Strict UTF-8 check written independently of the code under test: decode, then reject overlong
// forms, surrogates and values above U+10FFFF.
bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = s[i];
    size_t len;
    uint32_t cp;
    if (b < 0x80) {
      len = 1;
      cp = b;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      cp = b & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char c = s[i + k];
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// Nothing in `s` can drive a terminal: no C0 but \n and \t, no DEL, no C1 in its UTF-8 form (an
// 8-bit C1 byte would already fail IsValidUtf8).
bool HasNoControls(absl::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char b = s[i];
    if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7F) return false;
    if (b == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xA0) return false;
  }
  return true;
}

TEST(BoundedBufferTest, KeepsTheFirstCapBytesAndCountsAll) {
  BoundedBuffer buffer(5);
  buffer.Append("abc");
  EXPECT_EQ(buffer.data(), "abc");
  EXPECT_EQ(buffer.total_bytes(), 3u);
  EXPECT_FALSE(buffer.overflowed());
  buffer.Append("de");
  EXPECT_EQ(buffer.data(), "abcde");
  EXPECT_FALSE(buffer.overflowed()) << "exactly cap bytes is not an overflow";
  buffer.Append("fgh");
  buffer.Append("");
  buffer.Append("ij");
  EXPECT_EQ(buffer.data(), "abcde");
  EXPECT_EQ(buffer.total_bytes(), 10u);
  EXPECT_TRUE(buffer.overflowed());
}

TEST(BoundedBufferTest, ZeroCapOnlyCounts) {
  BoundedBuffer buffer(0);
  buffer.Append("x");
  EXPECT_EQ(buffer.data(), "");
  EXPECT_EQ(buffer.total_bytes(), 1u);
  EXPECT_TRUE(buffer.overflowed());
}

using CleanCase = testing::TextCase;

class CleanTest : public ::testing::TestWithParam<CleanCase> {};

TEST_P(CleanTest, RemovesControlsAndKeepsText) {
  const CleanCase& c = GetParam();
  EXPECT_EQ(Clean(c.input), c.expected);
}

// One byte at a time through the streaming filter gives the same text as the whole input at once.
TEST_P(CleanTest, StreamingByteByByteGivesTheSameText) {
  const CleanCase& c = GetParam();
  TerminalFilter filter;
  std::string streamed;
  for (char byte : c.input) streamed += filter.Filter(absl::string_view(&byte, 1));
  streamed += filter.Flush();
  EXPECT_EQ(streamed, c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    ControlSequences, CleanTest,
    ::testing::Values(
        CleanCase{"csi_color", "\x1b[1;31mred\x1b[0m plain", "red plain"},
        CleanCase{"csi_private_mode", "\x1b[?25lcursor\x1b[?25h", "cursor"},
        CleanCase{"csi_clear_and_home", "\x1b[2J\x1b[Htop", "top"},
        CleanCase{"csi_intermediate_byte", "a\x1b[0 qb", "ab"},  // DECSCUSR
        CleanCase{"osc_bel",
                  "\x1b]0;evil title\x07"
                  "after",
                  "after"},
        CleanCase{"osc_st_hyperlink", "\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
                  "link"},
        CleanCase{"osc52_clipboard", "\x1b]52;c;ZWNobyBoaQ==\x07ok", "ok"},
        CleanCase{"dcs", "a\x1bP1$r0m\x1b\\b", "ab"},
        CleanCase{"apc", "a\x1b_Gf=100;AAAA\x1b\\b", "ab"},
        CleanCase{"pm", "a\x1b^private\x1b\\b", "ab"},
        CleanCase{"sos", "a\x1bXstring\x1b\\b", "ab"},
        CleanCase{"bel_does_not_end_dcs", "\x1bPdata\x07more\x1b\\x", "x"},
        CleanCase{"esc_two_byte",
                  "\x1b"
                  "7saved\x1b"
                  "8\x1b"
                  "c\x1bMx",
                  "savedx"},
        CleanCase{"esc_nf_charset", "\x1b(Bascii\x1b)0\x1b#8", "ascii"},
        CleanCase{"c1_8bit_csi",
                  "\x9b"
                  "31mred",
                  "red"},
        CleanCase{"c1_8bit_osc_and_st",
                  "\x9d"
                  "0;title\x9c"
                  "after",
                  "after"},
        CleanCase{"c1_8bit_dcs",
                  "\x90"
                  "q#0\x9c"
                  "x",
                  "x"},
        CleanCase{"c1_8bit_other",
                  "a\x85"
                  "b\x8d"
                  "c",
                  "abc"},
        CleanCase{"c1_utf8_csi",
                  "\xc2\x9b"
                  "31mred",
                  "red"},
        CleanCase{"c1_utf8_osc_and_st",
                  "\xc2\x9d"
                  "0;t\xc2\x9c"
                  "after",
                  "after"},
        CleanCase{"c1_utf8_other",
                  "a\xc2\x85"
                  "b",
                  "ab"},
        CleanCase{"c0_controls",
                  "a\x01\x02\x07\x08\x0b\x0c\x0e\x1f\x7f"
                  "b",
                  "ab"},
        CleanCase{"nul", "a\0b\0"s, "ab"},
        CleanCase{"tab_and_newline_kept", "a\tb\nc\n", "a\tb\nc\n"},
        CleanCase{"crlf", "one\r\ntwo\r\n", "one\ntwo\n"},
        CleanCase{"lone_cr", "10%\r20%\rdone", "10%\n20%\ndone"},
        CleanCase{"cr_sequence_lf", "a\r\x1b[K\nb", "a\nb"},
        CleanCase{"cr_cr_lf", "a\r\r\nb", "a\n\nb"},
        CleanCase{"esc_then_newline", "a\x1b\nb", "a\nb"},
        CleanCase{"esc_esc_sequence", "a\x1b\x1b[31mb", "ab"},
        CleanCase{"csi_aborted_by_newline", "\x1b[31\nx", "\nx"},
        CleanCase{"csi_aborted_by_can", "\x1b[31\x18x", "x"},
        CleanCase{"osc_aborted_by_can", "\x1b]0;t\x18x", "x"},
        CleanCase{"osc_aborted_by_sub", "\x1b]0;t\x1aq", "q"},
        CleanCase{"esc_in_string_starts_new_sequence", "\x1b]0;t\x1b[31mx", "x"},
        CleanCase{"csi_with_non_ascii_aborts", "\x1b[3\xc3\xa9x", "\xc3\xa9x"},
        CleanCase{"trailing_esc", "abc\x1b", "abc"},
        CleanCase{"trailing_csi", "abc\x1b[12;", "abc"},
        CleanCase{"unterminated_osc_swallows_rest", "a\x1b]0;title and the rest", "a"},
        CleanCase{"utf8_kept",
                  "h\xc3\xa9llo \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89",
                  "h\xc3\xa9llo \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89"},
        CleanCase{"nbsp_is_text",
                  "a\xc2\xa0"
                  "b",
                  "a\xc2\xa0"
                  "b"}),
    testing::NameOf<CleanCase>);

INSTANTIATE_TEST_SUITE_P(
    InvalidUtf8, CleanTest,
    ::testing::Values(CleanCase{"invalid_byte",
                                "a\xff"
                                "b",
                                "a" + kFffd + "b"},
                      CleanCase{"truncated_sequence_is_one_replacement",
                                "a\xe4\xb8"
                                "A",
                                "a" + kFffd + "A"},
                      CleanCase{"truncated_at_end", "ok\xf0\x9f\x8e", "ok" + kFffd},
                      CleanCase{"overlong_slash", "\xc0\xaf", kFffd + kFffd},
                      CleanCase{"surrogate", "\xed\xa0\xbf", kFffd + kFffd + kFffd},
                      CleanCase{"above_u10ffff", "\xf5\xbf", kFffd + kFffd},
                      CleanCase{"lone_continuation_a0_bf", "\xa0\xbf", kFffd + kFffd},
                      // A stray 0x80..0x9F is an 8-bit C1 control and is dropped, not replaced.
                      CleanCase{"lone_continuation_80_9f", "x\x80y", "xy"}),
    testing::NameOf<CleanCase>);

TEST(PrintableRatioTest, CountsBytesOfPrintableCharacters) {
  EXPECT_DOUBLE_EQ(PrintableRatio(""), 1.0);
  EXPECT_DOUBLE_EQ(PrintableRatio("abc \t\r\n"), 1.0);
  EXPECT_DOUBLE_EQ(PrintableRatio("\x01\x02"), 0.0);
  EXPECT_DOUBLE_EQ(PrintableRatio("\xe6\x97\xa5\xe6\x9c\xac"), 1.0);  // CJK: every byte counts
  EXPECT_DOUBLE_EQ(PrintableRatio("\xff"
                                  "a"),
                   0.5);
  EXPECT_DOUBLE_EQ(PrintableRatio("\xc2\x85"
                                  "ab"),
                   0.5);                              // NEL is a C1 control
  EXPECT_DOUBLE_EQ(PrintableRatio("\x1b[31m"), 0.8);  // ESC is not printable, "[31m" is
  EXPECT_DOUBLE_EQ(PrintableRatio("\xe4\xb8"
                                  "ab"),
                   0.5);  // a cut character is not printable
  EXPECT_DOUBLE_EQ(PrintableRatio(std::string(3, '\0') + "a"), 0.25);
}

TEST(SanitizeOutputTest, PrintableRatioThresholdBothSides) {
  // Exactly 60% printable is kept (the rule is "less than 60%").
  SanitizedText at = SanitizeOutput(std::string(60, 'a') + std::string(40, '\x01'), false);
  EXPECT_FALSE(at.binary_omitted);
  EXPECT_EQ(at.text, std::string(60, 'a'));

  SanitizedText below = SanitizeOutput(std::string(59, 'a') + std::string(41, '\x01'), false);
  EXPECT_TRUE(below.binary_omitted);
  EXPECT_EQ(below.text, "[moat: 100 bytes of binary output omitted]");
}

TEST(SanitizeOutputTest, RandomBinaryIsOmitted) {
  std::mt19937 rng(42);
  std::string raw(4096, '\0');
  for (char& c : raw) c = static_cast<char>(rng());
  SanitizedText out = SanitizeOutput(raw, false);
  EXPECT_TRUE(out.binary_omitted);
  EXPECT_EQ(out.text, "[moat: 4096 bytes of binary output omitted]");
  EXPECT_EQ(out.secrets_masked, 0);
}

TEST(SanitizeOutputTest, BinaryPlaceholderSaysAtLeastWhenCut) {
  SanitizedText out = SanitizeOutput(std::string(100, '\0'), /*truncated_by_collector=*/true);
  EXPECT_TRUE(out.binary_omitted);
  EXPECT_TRUE(out.truncated);
  EXPECT_EQ(out.text, "[moat: at least 100 bytes of binary output omitted]");
}

TEST(SanitizeOutputTest, ThresholdIsAnOption) {
  SanitizeOptions options;
  options.min_printable_ratio = 0.0;
  SanitizedText out = SanitizeOutput("\x01\x02x", false, options);
  EXPECT_FALSE(out.binary_omitted);
  EXPECT_EQ(out.text, "x");
}

TEST(SanitizeOutputTest, EmptyInput) {
  SanitizedText out = SanitizeOutput("", false);
  EXPECT_EQ(out.text, "");
  EXPECT_FALSE(out.truncated);
  EXPECT_FALSE(out.binary_omitted);
}

TEST(SanitizeOutputTest, MasksSecretsAndReportsThem) {
  SanitizedText out = SanitizeOutput(
      "\x1b[32mOK\x1b[0m key AKIAIOSFODNN7EXAMPLE\r\nurl https://u:pa55w0rd@h/\r\n", false);
  EXPECT_EQ(out.text,
            "OK key [REDACTED:aws_access_key]\nurl https://u:[REDACTED:url_password]@h/\n");
  EXPECT_EQ(out.secrets_masked, 2);
  EXPECT_THAT(out.secret_kinds, ElementsAre("aws_access_key", "url_password"));
}

TEST(SanitizeOutputTest, SecretSplitByEscapeSequenceIsStillMasked) {
  // Masking runs on the cleaned text, which is what the reader sees.
  SanitizedText out = SanitizeOutput("AKIA\x1b[1mIOSFODNN7EXAMPLE\x1b[0m", false);
  EXPECT_EQ(out.text, "[REDACTED:aws_access_key]");
}

TEST(SanitizeOutputTest, MaskingCanBeTurnedOff) {
  SanitizeOptions options;
  options.mask_secrets = false;
  SanitizedText out = SanitizeOutput("AKIAIOSFODNN7EXAMPLE", false, options);
  EXPECT_EQ(out.text, "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(out.secrets_masked, 0);
}

TEST(SanitizeOutputTest, SecretCutByTheCollectorIsMasked) {
  SanitizedText cut = SanitizeOutput("token: AKIAIOSFOD", /*truncated_by_collector=*/true);
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(cut.text, "token: [REDACTED:aws_access_key]");
  EXPECT_EQ(cut.secrets_masked, 1);

  // The same bytes as a complete stream are a short word, not a key.
  SanitizedText whole = SanitizeOutput("token: AKIAIOSFOD", /*truncated_by_collector=*/false);
  EXPECT_FALSE(whole.truncated);
  EXPECT_EQ(whole.text, "token: AKIAIOSFOD");
}

TEST(SanitizeOutputTest, SecretCutByTheCapIsMasked) {
  const std::string before = std::string(60, 'x') + " key=";
  const std::string key = "sk-proj-" + std::string("Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90");
  SanitizeOptions options;
  options.max_bytes = before.size() + 30;  // cuts the key after 30 of its 48 bytes
  SanitizedText out = SanitizeOutput(before + key + " tail", false, options);
  EXPECT_TRUE(out.truncated);
  EXPECT_EQ(out.text, before + "[REDACTED:openai_key]");
  EXPECT_LE(out.text.size(), options.max_bytes);
}

TEST(SanitizeOutputTest, CutDropsAPartialCharacterInsteadOfReplacingIt) {
  EXPECT_EQ(SanitizeOutput("ab\xe6\x97", /*truncated_by_collector=*/true, NoRatio()).text, "ab");
  EXPECT_EQ(SanitizeOutput("ab\xe6\x97", /*truncated_by_collector=*/false, NoRatio()).text,
            "ab" + kFffd);
}

TEST(SanitizeOutputTest, CapIsRespectedOnMultiByteCharacters) {
  SanitizeOptions options;
  options.max_bytes = 10;
  // 6 characters of 3 bytes: the raw cap keeps 10 bytes, the 4th character is cut in half.
  SanitizedText out = SanitizeOutput(
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe6\x97\xa5\xe6\x9c\xac"
      "\xe8\xaa\x9e",
      false, options);
  EXPECT_TRUE(out.truncated);
  EXPECT_EQ(out.text, "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e");
}

TEST(SanitizeOutputTest, TextThatGrowsWhenCleanedIsCutAgain) {
  SanitizeOptions options;
  options.max_bytes = 10;
  options.min_printable_ratio = 0.0;
  // 10 invalid bytes become 10 U+FFFD of 3 bytes: only 3 whole ones fit.
  SanitizedText out = SanitizeOutput(std::string(10, '\xff'), false, options);
  EXPECT_TRUE(out.truncated);
  EXPECT_EQ(out.text, kFffd + kFffd + kFffd);
}

TEST(SanitizeOutputTest, FinalCutNeverSplitsARedactionMarker) {
  SanitizeOptions options;
  options.max_bytes = 30;
  // The key is cut at 30 raw bytes and masked; the marker does not fit and is dropped whole.
  SanitizedText out = SanitizeOutput("0123456789ABCDEF AKIAIOSFODNN7EXAMPLE", false, options);
  EXPECT_TRUE(out.truncated);
  EXPECT_EQ(out.text, "0123456789ABCDEF ");
  EXPECT_EQ(out.secrets_masked, 1);
}

TEST(SanitizeOutputTest, TinyCapCutsThePlaceholder) {
  SanitizeOptions options;
  options.max_bytes = 8;
  SanitizedText out = SanitizeOutput(std::string(8, '\0'), false, options);
  EXPECT_TRUE(out.binary_omitted);
  EXPECT_EQ(out.text, "[moat: 8");
}

// Random byte soup, rich in the bytes that matter (ESC, C1, UTF-8 leads, brackets, CR): whatever
// comes in, what comes out is valid UTF-8 without controls and within the cap, and the streaming
// filter gives the same text however the input is chunked.
TEST(SanitizeOutputTest, AnyInputGivesValidUtf8WithoutControls) {
  const std::string alphabet =
      "\x1b\x1b[]\\P_^X;0123456789mHa-zAZ \n\r\t\x07\x18\x00\x7f\x80\x85\x90\x9b\x9c\x9d\xa0\xbf"
      "\xc2\xc3\xe0\xe6\xed\xf0\xf4\xff"s;
  std::mt19937 rng(7);
  SanitizeOptions options;
  options.min_printable_ratio = 0.0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string raw(rng() % 200, '\0');
    for (char& c : raw) c = alphabet[rng() % alphabet.size()];
    options.max_bytes = 1 + rng() % 250;
    SanitizedText out = SanitizeOutput(raw, rng() % 2 == 0, options);
    ASSERT_TRUE(IsValidUtf8(out.text)) << ::testing::PrintToString(raw);
    ASSERT_TRUE(HasNoControls(out.text)) << ::testing::PrintToString(raw);
    ASSERT_LE(out.text.size(), options.max_bytes);

    std::string whole;
    TerminalFilter one_shot;
    one_shot.FilterTo(raw, &whole);
    one_shot.FlushTo(&whole);
    TerminalFilter chunked;
    std::string streamed;
    for (size_t pos = 0; pos < raw.size();) {
      const size_t len = std::min<size_t>(1 + rng() % 7, raw.size() - pos);
      streamed += chunked.Filter(absl::string_view(raw).substr(pos, len));
      pos += len;
    }
    streamed += chunked.Flush();
    ASSERT_EQ(streamed, whole) << ::testing::PrintToString(raw);
    ASSERT_TRUE(IsValidUtf8(whole) && HasNoControls(whole)) << ::testing::PrintToString(raw);
  }
}

// Text fed to one filter in chunks, and what each chunk must give out at once.
struct ChunkCase {
  std::string name;
  std::vector<std::pair<std::string, std::string>> chunks;  // {chunk, output}
};

void PrintTo(const ChunkCase& c, std::ostream* os) { *os << c.name; }

class TerminalFilterChunkTest : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(TerminalFilterChunkTest, EachChunkGivesOutWhatItCompletes) {
  TerminalFilter filter;
  for (const auto& [chunk, output] : GetParam().chunks) {
    EXPECT_EQ(filter.Filter(chunk), output) << "chunk " << ::testing::PrintToString(chunk);
  }
}

INSTANTIATE_TEST_SUITE_P(
    SplitOverChunks, TerminalFilterChunkTest,
    ::testing::Values(
        ChunkCase{"csi", {{"ab\x1b", "ab"}, {"[3", ""}, {"1mcd", "cd"}}},
        ChunkCase{"osc_inside_its_terminator", {{"\x1b]0;title\x1b", ""}, {"\\after", "after"}}},
        ChunkCase{"utf8_character_is_kept",
                  {{"x\xe6", "x"},
                   {"\x97", ""},
                   {"\xa5y", "\xe6\x97\xa5y"},
                   {"\xf0\x9f", ""},
                   {"\x8e\x89", "\xf0\x9f\x8e\x89"}}},
        ChunkCase{"utf8_c1_is_removed",
                  {{"a\xc2", "a"},
                   {"\x9b"
                    "31mb",
                    "b"}}},
        ChunkCase{"broken_character_is_replaced", {{"a\xe6\x97", "a"}, {"b", kFffd + "b"}}},
        ChunkCase{"cr_lf_is_one_newline", {{"a\r", "a\n"}, {"\nb", "b"}}}),
    testing::NameOf<ChunkCase>);

TEST(TerminalFilterTest, FlushReplacesAPartialCharacterAndResets) {
  TerminalFilter filter;
  EXPECT_EQ(filter.Filter("a\xe6\x97"), "a");
  EXPECT_EQ(filter.Flush(), kFffd);
  // An unterminated OSC does not leak into the next stream.
  EXPECT_EQ(filter.Filter("\x1b]0;never ended"), "");
  EXPECT_EQ(filter.Flush(), "");
  EXPECT_EQ(filter.Filter("next stream"), "next stream");
}

TEST(LargeInputTest, OneMebibyteOfTextIsFastAndUnchanged) {
  std::string raw;
  const std::string line =
      "2024-05-01T12:00:00Z INFO worker-3 processed request id=8812 in 12.5 ms (status=200)\n";
  while (raw.size() + line.size() <= (1u << 20)) raw += line;
  const auto start = std::chrono::steady_clock::now();
  SanitizedText out = SanitizeOutput(raw, false);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(out.text, raw);
  EXPECT_FALSE(out.truncated);
  // About 5 ms in an optimised build; the bound leaves room for slow, shared CI machines.
  EXPECT_LT(elapsed, std::chrono::milliseconds(500));
}

TEST(LargeInputTest, OversizedInputIsCutToTheCap) {
  std::string raw(3u << 20, 'a');
  for (size_t i = 100; i < raw.size(); i += 101) raw[i] = '\n';
  SanitizedText out = SanitizeOutput(raw, false);
  EXPECT_TRUE(out.truncated);
  EXPECT_EQ(out.text.size(), size_t{1} << 20);
}

TEST(LargeInputTest, AdversarialMebibytesFinishQuickly) {
  const std::vector<std::string> units = {"\x1b[",
                                          "\x1b]",
                                          "\x1b",
                                          "\x9b",
                                          "\xc2\x9d",
                                          "\xe6",
                                          "\r",
                                          "\x1bP",
                                          "\x1b[1;2;3;4;5;6",
                                          "-----BEGIN PRIVATE KEY-----\n",
                                          "sk-",
                                          "https://a:",
                                          "eyJ-",
                                          "\xff"};
  SanitizeOptions options;
  options.min_printable_ratio = 0.0;  // make the cleaner and the scanner do all the work
  for (const std::string& unit : units) {
    std::string raw;
    while (raw.size() < (1u << 20)) raw += unit;
    const auto start = std::chrono::steady_clock::now();
    SanitizedText out = SanitizeOutput(raw, true, options);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_LT(elapsed, std::chrono::milliseconds(500)) << ::testing::PrintToString(unit);
    EXPECT_LE(out.text.size(), options.max_bytes);
    EXPECT_TRUE(IsValidUtf8(out.text));
  }
}

}  // namespace
}  // namespace moat::sandbox
