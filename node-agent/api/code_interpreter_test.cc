#include "node-agent/api/code_interpreter.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::agent {
namespace {

using Kind = CodeFrame::Kind;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseCodeFrameTest, OutputIsAnEventWithItsTextCleaned) {
  CodeFrame frame = ParseCodeFrame(R"({"type": "stdout", "text": "\u001b[31mred\u001b[0m\n"})");
  EXPECT_EQ(frame.kind, Kind::kEvent);
  EXPECT_EQ(frame.event["type"], "stdout");
  // The JSON escape hid the colour from the first cleaning; it is cleaned after decoding.
  EXPECT_EQ(frame.event["text"], "red\n");
  EXPECT_EQ(ParseCodeFrame(R"({"type": "stderr", "text": "x"})").event["type"], "stderr");
  // Nothing left after cleaning: no event.
  EXPECT_TRUE(ParseCodeFrame(R"({"type": "stdout", "text": "\u001b[0m"})").event.is_null());
}

TEST(ParseCodeFrameTest, SecretsAreMaskedInEveryText) {
  const std::string key = "AKIAIOSFODNN7EXAMPLE";
  CodeFrame result =
      ParseCodeFrame(R"({"type": "result", "results": {"text": "')" + key + R"('"}})");
  EXPECT_EQ(result.kind, Kind::kEvent);
  EXPECT_THAT(result.event["results"]["text"].get<std::string>(), Not(HasSubstr(key)));
  CodeFrame error = ParseCodeFrame(R"({"type": "error", "error": {"ename": "E", "evalue": ")" +
                                   key + R"(", "traceback": ["a )" + key + R"("]}})");
  EXPECT_THAT(error.event.dump(), Not(HasSubstr(key)));
  EXPECT_THAT(error.event.dump(), HasSubstr("REDACTED"));
}

TEST(ParseCodeFrameTest, ErrorsCountsResultsAsExecdSendsThem) {
  CodeFrame error = ParseCodeFrame(
      R"({"type": "error", "error": {"ename": "NameError", "evalue": "name 'x' is not defined",)"
      R"( "traceback": ["Traceback (most recent call last):", "NameError: x"], "extra": 1}})");
  EXPECT_EQ(error.kind, Kind::kEvent);
  EXPECT_EQ(error.event, nlohmann::json::parse(R"({"type": "error", "error": {"ename": "NameError",
      "evalue": "name 'x' is not defined",
      "traceback": ["Traceback (most recent call last):", "NameError: x"]}})"));
  CodeFrame count = ParseCodeFrame(R"({"type": "execution_count", "execution_count": 3})");
  EXPECT_EQ(count.event,
            nlohmann::json::parse(R"({"type": "execution_count", "execution_count": 3})"));
  CodeFrame result =
      ParseCodeFrame(R"({"type": "result", "results": {"text": "42", "text/html": "<b>42</b>"}})");
  EXPECT_EQ(result.event["results"]["text/html"], "<b>42</b>");
}

TEST(ParseCodeFrameTest, DoneLostAndWhatIsNoFrame) {
  CodeFrame done = ParseCodeFrame(R"({"type": "done", "execution_time": 15})");
  EXPECT_EQ(done.kind, Kind::kDone);
  EXPECT_EQ(done.execution_time, 15);
  CodeFrame lost = ParseCodeFrame(R"({"type": "lost", "text": "[Errno 2] No such file"})");
  EXPECT_EQ(lost.kind, Kind::kLost);
  EXPECT_EQ(lost.text, "[Errno 2] No such file");
  for (const char* line : {"plain text", R"({"type": "stdout", "text": "cut)", "[1]",
                           R"({"type": 3})", R"({"type": "status", "text": "busy"})",
                           R"({"type": "execution_count", "execution_count": "1"})"}) {
    CodeFrame frame = ParseCodeFrame(line);
    EXPECT_EQ(frame.kind, Kind::kInvalid) << line;
    EXPECT_EQ(frame.text, line);
  }
}

}  // namespace
}  // namespace moat::agent
