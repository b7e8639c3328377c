#include "node-agent/metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, EverySeriesExistsBeforeUse) {
  AgentMetrics metrics({"python", "node"});
  std::string text = metrics.Serialize();
  for (const char* line :
       {"moat_sandboxes{state=\"ready\"} 0", "moat_sandboxes{state=\"recycling\"} 0",
        "moat_pool_depth{profile=\"python\"} 0", "moat_pool_target{profile=\"node\"} 0",
        "moat_pool_misses_total{profile=\"node\"} 0", "moat_recycle_backlog 0",
        "moat_violations_total{kind=\"syscall\"} 0", "moat_compromised_sandboxes_total 0",
        "moat_heartbeat_misses_total 0", "moat_sandbox_start_seconds_count{path=\"warm\"} 0",
        "moat_sandbox_start_seconds_count{path=\"cold\"} 0",
        "moat_command_duration_seconds_count 0", "moat_recycle_duration_seconds_count 0",
        "moat_egress_requests_total 0", "moat_egress_denials_total 0",
        "moat_node_cpu_capacity_cores 0", "moat_node_memory_used_bytes 0",
        "moat_node_pids_capacity 0"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

TEST(MetricsTest, UpdatesShowInTheText) {
  AgentMetrics metrics({"python"});
  metrics.SetSandboxes({{SandboxState::kReady, 3}, {SandboxState::kRunning, 1}});
  metrics.SetPoolDepth("python", 7);
  metrics.SetPoolDepth("ruby", 9);  // Not a configured profile: no new series.
  metrics.SetPoolTarget("python", 12);
  metrics.AddPoolMiss("python");
  metrics.AddPoolMiss("ruby");
  metrics.SetRecycleBacklog(4);
  metrics.AddViolation("syscall");
  metrics.AddViolation("syscall");
  metrics.AddViolation("made-up");
  metrics.AddCompromised();
  metrics.AddHeartbeatMiss();
  metrics.ObserveStart(StartPath::kWarm, absl::Milliseconds(1));
  metrics.ObserveCommand(absl::Milliseconds(3));
  metrics.ObserveRecycle(absl::Milliseconds(20));
  metrics.AddEgressRequest();
  metrics.AddEgressDenial();
  metrics.SetNodeUsage({2, 1.5, 4096, 1024, 100, 10});
  std::string text = metrics.Serialize();
  for (const char* line : {"moat_sandboxes{state=\"ready\"} 3",
                           "moat_sandboxes{state=\"running\"} 1",
                           "moat_sandboxes{state=\"creating\"} 0",
                           "moat_pool_depth{profile=\"python\"} 7",
                           "moat_pool_target{profile=\"python\"} 12",
                           "moat_pool_misses_total{profile=\"python\"} 1",
                           "moat_recycle_backlog 4",
                           "moat_violations_total{kind=\"syscall\"} 2",
                           "moat_violations_total{kind=\"other\"} 1",
                           "moat_compromised_sandboxes_total 1",
                           "moat_heartbeat_misses_total 1",
                           "moat_sandbox_start_seconds_count{path=\"warm\"} 1",
                           "moat_sandbox_start_seconds_count{path=\"cold\"} 0",
                           "moat_command_duration_seconds_count 1",
                           "moat_recycle_duration_seconds_count 1",
                           "moat_egress_requests_total 1",
                           "moat_egress_denials_total 1",
                           "moat_node_cpu_capacity_cores 2",
                           "moat_node_cpu_allocated_cores 1.5",
                           "moat_node_memory_capacity_bytes 4096",
                           "moat_node_pids_used 10"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  EXPECT_THAT(text, Not(HasSubstr("ruby")));
  EXPECT_THAT(text, Not(HasSubstr("made-up")));
}

}  // namespace
}  // namespace moat::agent
