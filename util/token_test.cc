#include "util/token.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/testing/temp_dir.h"

namespace moat {
namespace {

using ::testing::HasSubstr;

class TokenFileTest : public ::testing::Test {
 protected:
  std::string WriteFile(const std::string& name, const std::string& text, mode_t mode) {
    std::string path = dir_.File(name);
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }

  ScopedTempDir dir_;  // Removed with what the test wrote.
};

TEST_F(TokenFileTest, ReadsThePrivateFilesFirstLine) {
  auto token = ReadTokenFile(WriteFile("ok.token", "  0123456789abcdef0123 \nrest\n", 0600));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "0123456789abcdef0123");
}

TEST_F(TokenFileTest, RefusesFilesOthersCanRead) {
  for (mode_t mode : {0644, 0640, 0604, 0602}) {
    auto token = ReadTokenFile(WriteFile("open.token", "0123456789abcdef0123\n", mode));
    ASSERT_FALSE(token.ok()) << std::oct << mode;
    EXPECT_THAT(token.status().message(), HasSubstr("chmod 600"));
  }
}

TEST_F(TokenFileTest, RefusesShortTokensSymlinksAndMissingFiles) {
  EXPECT_THAT(ReadTokenFile(WriteFile("short.token", "abc\n", 0600)).status().message(),
              HasSubstr("shorter than 16"));
  std::string target = WriteFile("target.token", "0123456789abcdef0123\n", 0600);
  std::string link = dir_.File("link.token");
  unlink(link.c_str());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_FALSE(ReadTokenFile(link).ok());
  EXPECT_FALSE(ReadTokenFile("/nonexistent/agent.token").ok());
}

TEST(TokenTest, NewTokensAreLongAndDiffer) {
  auto a = NewToken();
  auto b = NewToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

TEST(TokenTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret-token", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret-tokeN"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(TokenTest, BearerToken) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer abc "), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken("Bearer "), "");
  EXPECT_EQ(BearerToken(""), "");
}

}  // namespace
}  // namespace moat
