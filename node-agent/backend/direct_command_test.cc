#include "node-agent/backend/direct_command.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

constexpr char kPath[] = "/usr/local/bin:/usr/bin:/bin";

TEST(DirectArgvTest, PlainWordsRunWithoutTheShell) {
  EXPECT_THAT(DirectArgv("/bin/true", kPath), Optional(ElementsAre("/bin/true")));
  EXPECT_THAT(DirectArgv("  python3\t-m  http.server 8000 ", kPath),
              Optional(ElementsAre("python3", "-m", "http.server", "8000")));
  EXPECT_THAT(DirectArgv("ls -la /workspace/a_b.c,d:e@f%g+h", kPath),
              Optional(ElementsAre("ls", "-la", "/workspace/a_b.c,d:e@f%g+h")));
  // '=' after the command name is a plain argument.
  EXPECT_THAT(DirectArgv("dd if=/dev/zero of=/tmp/x count=1", kPath),
              Optional(ElementsAre("dd", "if=/dev/zero", "of=/tmp/x", "count=1")));
}

TEST(DirectArgvTest, WhatTheShellWouldChangeNeedsTheShell) {
  for (const char* command :
       {"echo $HOME", "ls *.py", "ls file?", "ls [ab]", "cat ~/x", "a;b",
        "a && b",     "a | b",   "a > f",    "a < f",   "a &",     "(a)",
        "{ a; }",     "a 'b c'", "a \"b\"",  "a \\b",   "a `b`",   "a # comment",
        "A=1 env",    "a\nb",    "!a",       "a\rb"}) {
    EXPECT_EQ(DirectArgv(command, kPath), std::nullopt) << command;
  }
}

TEST(DirectArgvTest, BuiltinsAndReservedWordsNeedTheShell) {
  for (const char* command :
       {"true", "false", "echo hi", "exit 3", "cd /tmp", "printf x", "kill 1", "test -e f", "pwd",
        "wait", "if", "while", "for", ". /etc/profile", ": x", "exec ls", "export A", "unset A"}) {
    EXPECT_EQ(DirectArgv(command, kPath), std::nullopt) << command;
  }
  // A path to the program is not the builtin.
  EXPECT_THAT(DirectArgv("/bin/echo hi", kPath), Optional(ElementsAre("/bin/echo", "hi")));
}

TEST(DirectArgvTest, APathTheShellWouldSearchDifferentlyNeedsTheShell) {
  EXPECT_EQ(DirectArgv("ls", ""), std::nullopt);                // no PATH: the shell's default
  EXPECT_EQ(DirectArgv("ls", "/bin::/usr/bin"), std::nullopt);  // "": the working directory
  EXPECT_EQ(DirectArgv("ls", "/bin:"), std::nullopt);
  EXPECT_THAT(DirectArgv("./run.sh", ""), Optional(ElementsAre("./run.sh")));
  EXPECT_EQ(DirectArgv("", kPath), std::nullopt);
  EXPECT_EQ(DirectArgv(" \t ", kPath), std::nullopt);
}

}  // namespace
}  // namespace moat::agent
