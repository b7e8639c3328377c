#include "sandbox/cli/run_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace moat::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(RunFlagsTest, ParsesEveryOptionAndTheCommand) {
  absl::StatusOr<RunFlags> f = ParseRunFlags({"--policy",  "p.yaml",
                                              "--memory",  "64M",
                                              "--pids=10", "--cpus",
                                              "0.5",       "--cpu-timeout",
                                              "500ms",     "--wall-timeout",
                                              "2s",        "--tmpfs-size",
                                              "8M",        "--workspace",
                                              "/w",        "--env",
                                              "A=1",       "--env=B=x=y",
                                              "--json",    "--",
                                              "python3",   "-c",
                                              "print(1)"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->policy_file, "p.yaml");
  EXPECT_EQ(f->workspace, "/w");
  EXPECT_TRUE(f->json);
  EXPECT_EQ(f->layer.memory_bytes, 64u << 20);
  EXPECT_EQ(f->layer.pids, 10u);
  EXPECT_DOUBLE_EQ(*f->layer.cpus, 0.5);
  EXPECT_EQ(f->layer.cpu_timeout, absl::Milliseconds(500));
  EXPECT_EQ(f->layer.wall_timeout, absl::Seconds(2));
  EXPECT_EQ(f->layer.tmpfs_bytes, 8u << 20);
  EXPECT_THAT(f->layer.env, ElementsAre(Pair("A", "1"), Pair("B", "x=y")));
  EXPECT_THAT(f->command, ElementsAre("python3", "-c", "print(1)"));
}

TEST(RunFlagsTest, CommandMayStartWithoutDoubleDash) {
  absl::StatusOr<RunFlags> f = ParseRunFlags({"--json", "ls", "--all"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(f->command, ElementsAre("ls", "--all"));
  EXPECT_FALSE(f->layer.memory_bytes.has_value());
}

TEST(RunFlagsTest, OptionsAfterDoubleDashBelongToTheCommand) {
  absl::StatusOr<RunFlags> f = ParseRunFlags({"--", "--memory", "1G"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(f->command, ElementsAre("--memory", "1G"));
}

TEST(RunFlagsTest, ErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--frobnicate", "--", "true"}, "unknown option \"--frobnicate\""},
           {{"--memory", "lots", "--", "true"}, "--memory"},
           {{"--pids", "0", "--", "true"}, "--pids: invalid process limit \"0\""},
           {{"--pids", "-3", "--", "true"}, "--pids"},
           {{"--cpus", "abc", "--", "true"}, "--cpus"},
           {{"--cpu-timeout", "soon", "--", "true"}, "--cpu-timeout"},
           {{"--wall-timeout", "", "--", "true"}, "--wall-timeout"},
           {{"--env", "NOVALUE", "--", "true"}, "--env: expected NAME=VALUE"},
           {{"--env", "=x", "--", "true"}, "--env"},
           {{"--env", "1A=b", "--", "true"}, "--env: invalid environment variable name"},
           {{"--memory", "0", "--", "true"}, "--memory: the memory limit must be above 0"},
           {{"--tmpfs-size", "0", "--", "true"}, "--tmpfs-size"},
           {{"--wall-timeout", "0s", "--", "true"}, "--wall-timeout: a timeout must be"},
           {{"--cpu-timeout", "0", "--", "true"}, "--cpu-timeout"},
           {{"--memory"}, "--memory needs a value"},
           {{"--json"}, "no command given"},
           {{}, "no command given"},
       }) {
    absl::StatusOr<RunFlags> f = ParseRunFlags(c.args);
    ASSERT_FALSE(f.ok()) << c.message;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.message));
  }
}

TEST(RunFlagsTest, HelpNeedsNoCommand) {
  absl::StatusOr<RunFlags> f = ParseRunFlags({"--help"});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->help);
}

TEST(RunFlagsTest, UsageDocumentsEveryOption) {
  for (const char* option : {"--policy", "--memory", "--pids", "--cpus", "--cpu-timeout",
                             "--wall-timeout", "--tmpfs-size", "--workspace", "--env", "--json"}) {
    EXPECT_THAT(kRunUsage, HasSubstr(option));
  }
}

TEST(RunFlagsTest, CwdAndUserPolicies) {
  absl::StatusOr<RunFlags> f = ParseRunFlags(
      {"--cwd", "proj", "--user-policy", "a.json", "--user-policy=b.yaml", "--", "ls"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->cwd, "proj");
  EXPECT_EQ(f->user_policy_files, (std::vector<std::string>{"a.json", "b.yaml"}));
  EXPECT_FALSE(ParseRunFlags({"--cwd", "", "--", "ls"}).ok());
  EXPECT_FALSE(ParseRunFlags({"--user-policy", "", "--", "ls"}).ok());
  // `moat policy show` takes the same options and no command.
  f = ParseRunFlags({"--cwd", "proj", "--json"}, /*command_required=*/false);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->json);
  EXPECT_FALSE(ParseRunFlags({"--cwd", "proj", "ls"}, /*command_required=*/false).ok());
}

}  // namespace
}  // namespace moat::cli
