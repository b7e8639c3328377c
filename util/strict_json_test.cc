#include "util/strict_json.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat {
namespace {

using ::testing::HasSubstr;

std::string Nested(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(StrictJsonTest, ParsesWhatNlohmannParses) {
  absl::StatusOr<nlohmann::json> doc = ParseStrictJson<nlohmann::json>(R"({"a": [1, 2.5, "x"]})");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ((*doc)["a"][2], "x");
}

// nlohmann's DOM parser keeps the last of two equal keys; the strict one names the key instead.
TEST(StrictJsonTest, RefusesDuplicateKeysAtAnyDepth) {
  EXPECT_THAT(ParseStrictJson<nlohmann::json>(R"({"a": 1, "a": 2})").status().message(),
              HasSubstr("duplicate key \"a\""));
  EXPECT_THAT(
      ParseStrictJson<nlohmann::json>(R"({"x": [{"b": 1}, {"b": 1, "b": 2}]})").status().message(),
      HasSubstr("duplicate key \"x[1].b\""));
}

TEST(StrictJsonTest, OneDepthLimitForEveryDocument) {
  EXPECT_TRUE(ParseStrictJson<nlohmann::json>(Nested(kMaxJsonDepth)).ok());
  absl::StatusOr<nlohmann::json> deep = ParseStrictJson<nlohmann::json>(Nested(kMaxJsonDepth + 1));
  ASSERT_FALSE(deep.ok());
  EXPECT_THAT(deep.status().message(), HasSubstr("nested more than 32 levels deep"));
  // A document far deeper than any stack would survive is refused as quickly.
  EXPECT_FALSE(ParseStrictJson<nlohmann::json>(Nested(1'000'000)).ok());
}

TEST(StrictJsonTest, RefusesTrailingTextCommentsAndBadUtf8) {
  for (const char* text : {"{} x", "{} // c", "{\"a\": \"\xff\"}", "", "{"}) {
    EXPECT_FALSE(ParseStrictJson<nlohmann::json>(text).ok()) << text;
  }
}

TEST(StrictJsonTest, OrderedKeepsTheWrittenOrder) {
  absl::StatusOr<nlohmann::ordered_json> doc =
      ParseStrictJson<nlohmann::ordered_json>(R"({"z": 1, "a": 2})");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->begin().key(), "z");
}

}  // namespace
}  // namespace moat
