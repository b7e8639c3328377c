#include "util/quote.h"

#include <string>

#include "gtest/gtest.h"

namespace moat {
namespace {

TEST(QuoteForMessageTest, EscapesControlBytesAndTruncates) {
  EXPECT_EQ(QuoteForMessage("a.com"), "\"a.com\"");
  EXPECT_EQ(QuoteForMessage(absl::string_view("a\0\n", 3)), "\"a\\x00\\n\"");
  std::string long_text(200, 'x');
  std::string quoted = QuoteForMessage(long_text);
  EXPECT_EQ(quoted, "\"" + std::string(80, 'x') + "\"...");
}

// A client's newline cannot start a forged line in a log, nor a quote end the quoted value.
TEST(QuoteForMessageTest, ANewlineOrQuoteCannotForgeALogLine) {
  const std::string quoted = QuoteForMessage("sb-1\" at 12:00\nmoat-agent info: all fine");
  EXPECT_EQ(quoted.find('\n'), std::string::npos);
  EXPECT_EQ(quoted, "\"sb-1\\\" at 12:00\\nmoat-agent info: all fine\"");
}

}  // namespace
}  // namespace moat
