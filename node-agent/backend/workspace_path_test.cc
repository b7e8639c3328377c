#include "node-agent/backend/workspace_path.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moat::agent {
namespace {

TEST(WorkspaceRelativePathTest, AcceptsPathsUnderTheWorkspace) {
  struct Case {
    std::string in, out;
  };
  for (const Case& c : std::vector<Case>{{"/workspace", ""},
                                         {"/workspace/", ""},
                                         {"/workspace/a/b.txt", "a/b.txt"},
                                         {"a//./b", "a/b"},
                                         {"notes.md", "notes.md"},
                                         {"", ""}}) {
    auto got = WorkspaceRelativePath(c.in);
    ASSERT_TRUE(got.ok()) << c.in << ": " << got.status();
    EXPECT_EQ(*got, c.out) << c.in;
  }
}

TEST(WorkspaceRelativePathTest, RefusesEscapes) {
  for (const std::string& bad : std::vector<std::string>{
           "/etc/passwd", "/workspace/../etc", "../x", "a/../../b", "/workspacex/a",
           std::string("a\0b", 3), "a\nb", std::string(5000, 'a')}) {
    auto got = WorkspaceRelativePath(bad);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
TEST(SandboxRootRelativePathTest, AnyAbsolutePathRelativeOnesUnderTheWorkspace) {
  EXPECT_EQ(*SandboxRootRelativePath("/tmp/a//b/./c"), "tmp/a/b/c");
  EXPECT_EQ(*SandboxRootRelativePath("/"), "");
  EXPECT_EQ(*SandboxRootRelativePath("a/b"), "workspace/a/b");
  EXPECT_EQ(*SandboxRootRelativePath("."), "workspace");
  for (const std::string& bad : std::vector<std::string>{"/tmp/../etc", "../x",
                                                         "a\x01"
                                                         "b",
                                                         std::string(5000, 'a')}) {
    EXPECT_EQ(SandboxRootRelativePath(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace moat::agent
