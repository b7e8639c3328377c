#include "node-agent/probe/probe_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace moat::agent::probe {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ProbeConfig> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "moat-probe");
  return ParseProbeFlags(static_cast<int>(args.size()), args.data());
}

TEST(ParseProbeFlagsTest, ParsesEveryFlag) {
  auto config =
      Parse({"--pidfd-fd=3", "--report-fd=4", "--seccomp-fd=5", "--arch=aarch64",
             "--cgroup-dir=/sys/fs/cgroup/memory/moat/a", "--cgroup-dir=/sys/fs/cgroup/pids/moat/a",
             "--interval=250ms", "--memory-max=1048576", "--pids-max=32", "--cpu-seconds-max=1.5",
             "--sandbox-id=sb-1", "--expected-mounts-from-start"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pidfd_fd, 3);
  EXPECT_EQ(config->report_fd, 4);
  EXPECT_EQ(config->seccomp_fd, 5);
  EXPECT_EQ(config->arch, sandbox::Arch::kAarch64);
  EXPECT_THAT(config->cgroup_dirs,
              ::testing::ElementsAre("/sys/fs/cgroup/memory/moat/a", "/sys/fs/cgroup/pids/moat/a"));
  EXPECT_EQ(config->interval, absl::Milliseconds(250));
  EXPECT_EQ(config->memory_max, 1048576u);
  EXPECT_EQ(config->pids_max, 32u);
  EXPECT_EQ(config->cpu_seconds_max, 1.5);
  EXPECT_EQ(config->sandbox_id, "sb-1");
  EXPECT_TRUE(config->expected_mounts_from_start);
}

TEST(ParseProbeFlagsTest, DefaultsAndPid) {
  auto config = Parse({"--pid=42", "--report-fd=1", "--sandbox-id=x"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pid, 42);
  EXPECT_EQ(config->interval, absl::Seconds(5));
  EXPECT_FALSE(config->cpu_seconds_max.has_value());
  EXPECT_FALSE(config->expected_mounts_from_start);
}

TEST(ParseProbeFlagsTest, BadFlagsSayWhatIsExpected) {
  EXPECT_THAT(Parse({"--report-fd=1", "--sandbox-id=x"}).status().message(),
              HasSubstr("--pidfd-fd"));
  EXPECT_THAT(
      Parse({"--pid=1", "--pidfd-fd=3", "--report-fd=1", "--sandbox-id=x"}).status().message(),
      HasSubstr("exactly one"));
  EXPECT_THAT(Parse({"--pid=1", "--sandbox-id=x"}).status().message(), HasSubstr("--report-fd"));
  EXPECT_THAT(
      Parse({"--pid=1", "--report-fd=1", "--sandbox-id=x", "--interval=1"}).status().message(),
      HasSubstr("duration"));
  EXPECT_THAT(
      Parse({"--pid=1", "--report-fd=1", "--sandbox-id=x", "--memory-max=0", "--cgroup-dir=/a"})
          .status()
          .message(),
      HasSubstr("positive"));
  EXPECT_THAT(
      Parse({"--pid=1", "--report-fd=1", "--sandbox-id=x", "--pids-max=3"}).status().message(),
      HasSubstr("--cgroup-dir"));
  EXPECT_THAT(Parse({"--pid=1", "--report-fd=1", "--sandbox-id=x", "--bogus=1"}).status().message(),
              HasSubstr("unknown flag"));
  EXPECT_THAT(
      Parse({"--pid=1", "--report-fd=1", "--sandbox-id=x", "--arch=mips"}).status().message(),
      HasSubstr("x86_64 or aarch64"));
}

}  // namespace
}  // namespace moat::agent::probe
