#include "util/shell_command.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat {
namespace {

TEST(ShellQuoteTest, QuotesEveryWordAndItsSingleQuotes) {
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
}

TEST(ExecCommandTest, ExecsTheWordsEachQuoted) {
  EXPECT_EQ(ExecCommand({"tail", "-f", "/dev/null"}), "exec 'tail' '-f' '/dev/null'");
  EXPECT_EQ(ExecCommand({"sh", "-c", "echo '$x'"}), "exec 'sh' '-c' 'echo '\\''$x'\\'''");
}

TEST(EntrypointCheckCommandTest, ChecksTheProgramQuoted) {
  const std::string check = EntrypointCheckCommand("my prog;rm -rf /");
  EXPECT_THAT(check, testing::StartsWith("p='my prog;rm -rf /'; case $p in"));
  EXPECT_THAT(check, testing::HasSubstr("command -v \"$p\""));
}

TEST(EntrypointNotRunnableMessageTest, NamesTheProgramAndWhatToGive) {
  EXPECT_EQ(EntrypointNotRunnableMessage("nope\n"),
            "\"entrypoint\": \"nope\\n\" is not a program the sandbox can run (not in its PATH, or "
            "not an executable file); give one its image has, e.g. [\"tail\", \"-f\", "
            "\"/dev/null\"]");
}

}  // namespace
}  // namespace moat
