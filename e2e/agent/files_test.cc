// execd's file routes on the real agent, checked from inside the sandbox.
#include <httplib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "e2e/agent/agent_harness.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

class FilesTest : public OneSandboxTest {
 protected:
  FilesTest() : OneSandboxTest("/usr/bin/stat") {}
};

// createDirectories honours the mode asked for, with no umask taken off (777 stays 777), and
// makes the parents as `mkdir -p -m` does.
TEST_F(FilesTest, DirectoriesGetTheModeAskedFor) {
  httplib::Result made = agent_->NewClient()->Post(
      absl::StrCat("/v1/sandboxes/", id_, "/execd/directories"),
      httplib::Headers{{"X-EXECD-ACCESS-TOKEN", token_}},
      R"({"/workspace/a/b": {"mode": 700}, "/tmp/shared": {"mode": 777}, "/workspace/c": {}})",
      "application/json");
  ASSERT_TRUE(made);
  EXPECT_EQ(made->status, 200) << made->body;
  CommandRun stat = agent_->Run(
      id_, token_, "stat -c '%a %n' /workspace/a/b /workspace/a /tmp/shared /workspace/c");
  EXPECT_TRUE(stat.completed) << stat.error << stat.stderr_text;
  EXPECT_EQ(stat.stdout_text,
            "700 /workspace/a/b\n755 /workspace/a\n777 /tmp/shared\n755 /workspace/c\n");
}

}  // namespace
}  // namespace moat::e2e
