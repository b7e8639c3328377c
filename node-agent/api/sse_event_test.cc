#include "node-agent/api/sse_event.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace moat::agent {
namespace {

using nlohmann::json;

// What the encoder must equal: nlohmann's dump as the agent calls it.
std::string Nlohmann(const std::string& text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Ours(const std::string& text) {
  std::string out = "x";  // Appends: what was there stays.
  AppendJsonString(text, &out);
  return out.substr(1);
}

// Inputs where an escaper or a UTF-8 decoder goes wrong: every escape, every control byte,
// 0x7F, multi-byte characters, overlong forms, surrogates, past U+10FFFF, lone continuation
// bytes, sequences cut short mid-string and at the end, and a bad byte that starts a good one.
std::vector<std::string> TrickyInputs() {
  std::vector<std::string> in = {
      "",
      "plain ascii",
      "quote \" backslash \\ slash /",
      "\b\t\n\f\r",
      std::string("nul \0 inside", 12),
      "\x7f del",
      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf",  // é € 😀 U+10FFFF
      "\xc0\xaf",                                                    // overlong '/'
      "\xc1\xbf",
      "\xe0\x80\xaf",      // overlong, 3 bytes
      "\xe0\xa0\x80",      // smallest 3-byte
      "\xed\xa0\x80",      // surrogate D800
      "\xed\x9f\xbf",      // U+D7FF, fine
      "\xf0\x80\x80\xaf",  // overlong, 4 bytes
      "\xf0\x90\x80\x80",  // U+10000
      "\xf4\x90\x80\x80",  // past U+10FFFF
      "\xf5\x80\x80\x80",
      "\xff\xfe",
      "\x80",
      "a\xbf\xbf b",
      "\xc3",          // cut at the end
      "\xe2\x82",      // cut at the end
      "\xf0\x9f\x98",  // cut at the end
      "\xe2\x82x",     // cut mid-string by ASCII
      "\xe2\xc3\xa9",  // cut by the start of a good sequence
      "\xf0\x9f\xc3",  // cut, then a cut sequence at the end
      "\xe2\x82\"",    // cut by a quote
      "\xe2\x82\n",    // cut by a control byte
      "\xc3\xa9\xc3",  // good then cut
      "\xc3\xc3\xa9",
      "\xef\xbf\xbd",        // U+FFFD itself
      "\x1b[31mred\x1b[0m",  // terminal escapes (cleaned before, but still)
  };
  for (int c = 0; c < 0x20; ++c) in.push_back(std::string(1, static_cast<char>(c)));
  for (int c = 0x80; c < 0x100; ++c) {
    in.push_back(std::string(1, static_cast<char>(c)));
    in.push_back(std::string("a") + static_cast<char>(c) + "\x80" + "b");
  }
  return in;
}

TEST(AppendJsonStringTest, SameBytesAsNlohmannOnTrickyInputs) {
  for (const std::string& text : TrickyInputs()) {
    EXPECT_EQ(Ours(text), Nlohmann(text)) << "input: " << absl::CHexEscape(text);
  }
}

// Random byte strings, drawn so that every branch is hit often: plain ASCII, the bytes that
// are escaped, lead bytes of every length, continuation bytes in and out of range.
TEST(AppendJsonStringTest, SameBytesAsNlohmannOnRandomBytes) {
  std::mt19937 rng(20261202);
  const std::string interesting =
      "\"\\\b\t\n\f\r\x01\x1f\x7f\x80\x8f\x90\x9f\xa0\xbf\xc0\xc1"
      "\xc2\xdf\xe0\xe1\xec\xed\xee\xef\xf0\xf1\xf3\xf4\xf5\xff";
  std::uniform_int_distribution<int> length(0, 24);
  std::uniform_int_distribution<int> kind(0, 3);
  std::uniform_int_distribution<int> any_byte(0, 255);
  std::uniform_int_distribution<int> continuation(0x80, 0xBF);
  std::uniform_int_distribution<size_t> pick(0, interesting.size() - 1);
  int differing = 0;
  for (int n = 0; n < 5000; ++n) {
    std::string text;
    for (int i = length(rng); i > 0; --i) {
      switch (kind(rng)) {
        case 0:
          text.push_back(static_cast<char>('a' + i % 26));
          break;
        case 1:
          text.push_back(interesting[pick(rng)]);
          break;
        case 2:
          text.push_back(static_cast<char>(continuation(rng)));
          break;
        default:
          text.push_back(static_cast<char>(any_byte(rng)));
      }
    }
    std::string ours = Ours(text);
    std::string theirs = Nlohmann(text);
    if (ours != theirs && ++differing <= 10) {
      ADD_FAILURE() << "input: " << absl::CHexEscape(text) << "\n ours: " << absl::CHexEscape(ours)
                    << "\n nlohmann: " << absl::CHexEscape(theirs);
    }
  }
  EXPECT_EQ(differing, 0);
}

TEST(OutputEventWriterTest, SameBytesAsTheEventObject) {
  const OutputEventWriter writer(1764650000123);
  for (const std::string& text : TrickyInputs()) {
    for (bool partial : {false, true}) {
      for (OutputStream stream : {OutputStream::kStdout, OutputStream::kStderr}) {
        json event = {{"type", stream == OutputStream::kStdout ? "stdout" : "stderr"},
                      {"text", text},
                      {"timestamp", int64_t{1764650000123}}};
        if (partial) event["partial"] = true;
        std::string out = "kept";
        writer.Append(stream, text, partial, &out);
        EXPECT_EQ(out, "kept" + SseEvent(event)) << "input: " << absl::CHexEscape(text);
      }
    }
  }
}

}  // namespace
}  // namespace moat::agent
