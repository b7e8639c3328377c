// Sandboxes that outlive their agent (docs/agent.md, "Sandboxes that outlive their agent"): the
// real daemon is stopped (SIGTERM) or killed (SIGKILL) while a command runs, and a new one on the
// same state directory re-adopts the sandbox: the command goes on, its output from before and
// after the restart and its exit status are served, and the sandbox takes new commands. A
// sandbox nobody re-adopts within the grace ends itself and is cleaned at the next start.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "e2e/agent/agent_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

class AdoptionE2eTest : public ::testing::Test {
 protected:
  // The host's moat cgroups of sandbox `id`, whatever they are named after.
  static std::vector<std::string> CgroupsOf(const std::string& id) {
    std::vector<std::string> found;
    for (const std::string& cgroup : SnapshotHost().moat_cgroups) {
      if (cgroup.size() >= id.size() &&
          cgroup.compare(cgroup.size() - id.size(), id.size(), id) == 0) {
        found.push_back(cgroup);
      }
    }
    return found;
  }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the agent makes real sandboxes: run as root";
    if (::access(AgentBinary().c_str(), X_OK) != 0) FAIL() << "no moat-agent at " << AgentBinary();
  }

  std::unique_ptr<AgentProcess> StartAgent(const AgentSetup& setup,
                                           const std::string& state_dir = "") {
    absl::StatusOr<std::unique_ptr<AgentProcess>> agent = AgentProcess::Start(setup, state_dir);
    EXPECT_TRUE(agent.ok()) << agent.status();
    return agent.ok() ? *std::move(agent) : nullptr;
  }

  // GET on the per-sandbox API; (status, body).
  static std::pair<int, std::string> Execd(AgentProcess& agent, const std::string& id,
                                           const std::string& token, const std::string& path) {
    httplib::Client client("127.0.0.1", agent.port());
    client.set_read_timeout(static_cast<time_t>(Scaled(10)), 0);
    httplib::Result res = client.Get(absl::StrCat("/v1/sandboxes/", id, "/execd", path),
                                     httplib::Headers{{"X-EXECD-ACCESS-TOKEN", token}});
    if (!res) return {0, ""};
    return {res->status, res->body};
  }

  // A command that prints 1..30 over ~6 s and exits 3, started in the background; its id.
  static std::string StartCounter(AgentProcess& agent, const std::string& id,
                                  const std::string& token, const std::string& marker) {
    CommandRun run = agent.Run(
        id, token,
        absl::StrCat("for i in $(seq 30); do echo $i; sleep 0.2; done; exit 3 # ", marker), nullptr,
        R"({"background": true})");
    EXPECT_EQ(run.http_status, 200);
    for (const nlohmann::json& e : run.events) {
      if (e.value("type", "") == "init") return e.value("text", "");
    }
    ADD_FAILURE() << "no init event";
    return "";
  }

  // Waits (a few seconds at most) until a host process's command line contains `marker`.
  static bool Appears(const std::string& marker) {
    for (int i = 0; i < Rounds(100) && ProcessesWith(marker).empty(); ++i) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    return !ProcessesWith(marker).empty();
  }

  // Waits until the command has ended; its status body.
  static nlohmann::json WaitEnded(AgentProcess& agent, const std::string& id,
                                  const std::string& token, const std::string& command) {
    nlohmann::json status;
    for (int i = 0; i < 300; ++i) {
      auto [code, body] = Execd(agent, id, token, "/command/status/" + command);
      status = nlohmann::json::parse(body, nullptr, false);
      if (code == 200 && status.is_object() && !status.value("running", true)) return status;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "command " << command << " did not end: " << status.dump();
    return status;
  }

  // How the first agent ends: SIGTERM (systemctl stop), SIGKILL, or its container stopped (a
  // DaemonSet rollout: everything in the container's cgroups is killed).
  enum class End { kStop, kKill, kContainer };

  // Restart with a command across it: `end` ends the first agent.
  void CommandCarriesOverARestart(End end) {
    const std::string marker = absl::StrCat("adopt", ::getpid(), "x", static_cast<int>(end));
    const AgentSetup setup{.restart_grace = "30s", .in_container = end == End::kContainer};
    std::unique_ptr<AgentProcess> agent = StartAgent(setup);
    ASSERT_NE(agent, nullptr);
    auto sandbox = agent->CreateSandbox();
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    const auto& [id, token] = *sandbox;
    agent->Run(id, token, "echo kept > /workspace/f");
    const std::string command = StartCounter(*agent, id, token, marker);
    ASSERT_FALSE(command.empty());
    absl::SleepFor(absl::Seconds(1));  // a few lines are read by the first agent
    const std::string state_dir = agent->state_dir();
    agent->KeepDirectory();
    const std::vector<pid_t> probes = ProbesOf(id);
    EXPECT_EQ(probes.size(), 1u);
    switch (end) {
      case End::kStop:
        agent->Stop();
        break;
      case End::kKill:
        agent->Kill(SIGKILL);
        break;
      case End::kContainer:
        agent->KillContainer();
        break;
    }
    // The command goes on without an agent, and the probe that holds its seccomp listener.
    absl::SleepFor(absl::Milliseconds(500));
    EXPECT_FALSE(ProcessesWith(marker).empty()) << "the sandbox ended with its agent";
    EXPECT_EQ(ProbesOf(id), probes) << "the probe ended with its agent";

    std::unique_ptr<AgentProcess> restarted = StartAgent(setup, state_dir);
    ASSERT_NE(restarted, nullptr);
    EXPECT_THAT(restarted->Log(), HasSubstr(absl::StrCat("sandbox ", id, " is served again")));
    EXPECT_EQ(restarted->Node("GET", "/v1/sandboxes/" + id).first, 200);

    const nlohmann::json status = WaitEnded(*restarted, id, token, command);
    EXPECT_EQ(status.value("exit_code", -1), 3) << status.dump();
    auto [code, logs] = Execd(*restarted, id, token, "/command/" + command + "/logs");
    EXPECT_EQ(code, 200);
    std::vector<std::string> expected;
    for (int i = 1; i <= 30; ++i) expected.push_back(std::to_string(i));
    EXPECT_EQ(logs, absl::StrJoin(expected, "\n") + "\n");

    // The same sandbox, its files kept, takes new commands.
    CommandRun after = restarted->Run(id, token, "cat /workspace/f");
    EXPECT_EQ(after.stdout_text, "kept\n");
    // And a wrong token is still refused.
    EXPECT_EQ(Execd(*restarted, id, "not-the-token", "/command/status/" + command).first, 401);

    auto [deleted, report] = restarted->Node("DELETE", "/v1/sandboxes/" + id);
    EXPECT_EQ(deleted, 200) << report.dump();
    EXPECT_THAT(ProcessesWith(marker), IsEmpty());
    EXPECT_THAT(CgroupsOf(id), IsEmpty());
    restarted.reset();
    std::filesystem::remove_all(std::filesystem::path(state_dir).parent_path());
  }
};

TEST_F(AdoptionE2eTest, CommandRunsAcrossStopAndStart) { CommandCarriesOverARestart(End::kStop); }

TEST_F(AdoptionE2eTest, CommandRunsAcrossKillAndStart) { CommandCarriesOverARestart(End::kKill); }

// A DaemonSet rollout: the runtime kills every process in the old agent's container cgroups (in
// every hierarchy, as runc's kill --all does with the one it reads); the sandbox and its probe
// had left them, and the next agent, in a new container, serves the command on.
TEST_F(AdoptionE2eTest, ASandboxOutlivesItsAgentsContainer) {
  CommandCarriesOverARestart(End::kContainer);
}

// The probe held the sandbox's seccomp listener; without it the sandbox's watched calls fail
// unreported. A sandbox whose probe is gone when the next agent starts is therefore not served
// again: it is ended and cleaned as a crashed agent's.
TEST_F(AdoptionE2eTest, ASandboxWhoseProbeIsGoneIsEndedNotServed) {
  const std::string marker = absl::StrCat("6", ::getpid(), "17");
  const AgentSetup setup{.restart_grace = "30s"};
  std::unique_ptr<AgentProcess> agent = StartAgent(setup);
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  CommandRun bg = agent->Run(id, token, absl::StrCat("sleep 1000.", marker), nullptr,
                             R"({"background": true})");
  EXPECT_EQ(bg.http_status, 200);
  ASSERT_TRUE(Appears(marker));
  const std::vector<pid_t> probes = ProbesOf(id);
  ASSERT_EQ(probes.size(), 1u);
  const std::string state_dir = agent->state_dir();
  agent->KeepDirectory();
  agent->Kill(SIGKILL);
  ASSERT_EQ(::kill(probes[0], SIGKILL), 0);
  for (int i = 0; i < Rounds(100) && !ProbesOf(id).empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(ProcessesWith(marker).empty()) << "the sandbox did not wait for the grace";

  std::unique_ptr<AgentProcess> restarted = StartAgent(setup, state_dir);
  ASSERT_NE(restarted, nullptr);
  EXPECT_THAT(restarted->Log(),
              HasSubstr(absl::StrCat("sandbox ", id, " not re-adopted: its probe is gone")));
  EXPECT_EQ(restarted->Node("GET", "/v1/sandboxes/" + id).first, 404);
  EXPECT_THAT(ProcessesWith(marker), IsEmpty());
  EXPECT_THAT(CgroupsOf(id), IsEmpty());
  EXPECT_TRUE(std::filesystem::is_empty(state_dir + "/sandboxes"));
  restarted.reset();
  std::filesystem::remove_all(std::filesystem::path(state_dir).parent_path());
}

// A command's timeout counts across the restart: the new agent ends it when it is due (at once
// if it fell due while no agent ran), as the first would have.
TEST_F(AdoptionE2eTest, ACarriedOverCommandKeepsItsTimeout) {
  const std::string marker = absl::StrCat("8", ::getpid(), "31");
  const AgentSetup setup{.restart_grace = "30s"};
  std::unique_ptr<AgentProcess> agent = StartAgent(setup);
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  CommandRun bg = agent->Run(id, token, absl::StrCat("echo started; sleep 300.", marker), nullptr,
                             R"({"background": true, "timeout": 4000})");
  ASSERT_EQ(bg.http_status, 200);
  std::string command;
  for (const nlohmann::json& e : bg.events) {
    if (e.value("type", "") == "init") command = e.value("text", "");
  }
  ASSERT_FALSE(command.empty());
  ASSERT_TRUE(Appears(marker));
  const std::string state_dir = agent->state_dir();
  agent->KeepDirectory();
  agent->Stop();
  EXPECT_FALSE(ProcessesWith(marker).empty()) << "the command ended with its agent";

  std::unique_ptr<AgentProcess> restarted = StartAgent(setup, state_dir);
  ASSERT_NE(restarted, nullptr);
  // Without its deadline it would sleep on for 300 s; WaitEnded gives up after about 15.
  const nlohmann::json status = WaitEnded(*restarted, id, token, command);
  EXPECT_EQ(status.value("status", ""), "timed_out") << status.dump();
  EXPECT_EQ(status.value("exit_code", -1), 137) << status.dump();
  EXPECT_THAT(ProcessesWith(marker), IsEmpty());
  auto [code, logs] = Execd(*restarted, id, token, "/command/" + command + "/logs");
  EXPECT_EQ(logs, "started\n");

  // A command without a timeout is not given one.
  EXPECT_EQ(restarted->Run(id, token, "sleep 1; echo slept").stdout_text, "slept\n");
  EXPECT_EQ(restarted->Node("DELETE", "/v1/sandboxes/" + id).first, 200);
  restarted.reset();
  std::filesystem::remove_all(std::filesystem::path(state_dir).parent_path());
}

// A sandbox with egress is kept across the restart too: the new agent serves its proxy again
// from the policy in the record, so an allowed request to a server on the host's loopback goes
// through and a refused one is refused, and reported (the observer is wired again), after it.
TEST_F(AdoptionE2eTest, ASandboxWithEgressKeepsItsProxy) {
  if (::access("/usr/bin/curl", X_OK) != 0) GTEST_SKIP() << "the host root has no curl";
  httplib::Server web;
  web.Get("/hi", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("hello", "text/plain");
  });
  const int port = web.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&web] { web.listen_after_bind(); });
  auto stop_web = absl::MakeCleanup([&] {
    web.stop();
    serving.join();
  });
  const AgentSetup setup{.restart_grace = "30s"};
  std::unique_ptr<AgentProcess> agent = StartAgent(setup);
  ASSERT_NE(agent, nullptr);
  const nlohmann::json create = {
      {"profile", "default"},
      {"ttl_seconds", 600},
      {"policy",
       {{"network", {{"allowedDomains", {"127.0.0.1"}}, {"allowedCidrs", {"127.0.0.1/32"}}}}}}};
  auto sandbox = agent->CreateSandbox(create.dump());
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  // Through the proxy its environment names (--noproxy '': not even for loopback); 127.0.0.2 is
  // not an allowed name.
  const std::string requests = absl::StrCat(
      "curl --noproxy '' -s --max-time 10 -w ' %{http_code}\\n' http://127.0.0.1:", port,
      "/hi; curl --noproxy '' -s --max-time 10 -o /dev/null -w '%{http_code}\\n' "
      "http://127.0.0.2:",
      port, "/hi");
  EXPECT_EQ(agent->Run(id, token, requests).stdout_text, "hello 200\n403\n");
  const std::string state_dir = agent->state_dir();
  agent->KeepDirectory();
  agent->Stop();

  std::unique_ptr<AgentProcess> restarted = StartAgent(setup, state_dir);
  ASSERT_NE(restarted, nullptr);
  EXPECT_THAT(restarted->Log(), HasSubstr(absl::StrCat("sandbox ", id, " is served again")));
  EXPECT_EQ(restarted->Run(id, token, requests).stdout_text, "hello 200\n403\n");
  bool reported = false;
  for (int i = 0; i < 100 && !reported; ++i) {
    auto [code, events] = restarted->Node("GET", "/v1/events");
    for (const auto& e : events["events"]) {
      reported |= e["sandbox_id"] == id && e["type"] == "violation" && e["kind"] == "egress" &&
                  e["detail"].dump().find("127.0.0.2") != std::string::npos;
    }
    if (!reported) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(reported) << "the new agent does not hear of the refused request";
  EXPECT_EQ(restarted->Node("DELETE", "/v1/sandboxes/" + id).first, 200);
  restarted.reset();
  std::filesystem::remove_all(std::filesystem::path(state_dir).parent_path());
}

// Nobody re-adopts the sandbox: it lives through the grace, then ends itself; the next agent
// cleans its cgroups and records and does not serve it.
TEST_F(AdoptionE2eTest, SandboxEndsItselfAfterTheGrace) {
  const std::string marker = absl::StrCat("7", ::getpid(), "29");
  const AgentSetup setup{.restart_grace = "2s"};
  std::unique_ptr<AgentProcess> agent = StartAgent(setup);
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  CommandRun bg = agent->Run(sandbox->first, sandbox->second, absl::StrCat("sleep 1000.", marker),
                             nullptr, R"({"background": true})");
  EXPECT_EQ(bg.http_status, 200);
  ASSERT_TRUE(Appears(marker));
  const pid_t old_pid = agent->pid();
  const std::string state_dir = agent->state_dir();
  agent->KeepDirectory();
  agent->Kill(SIGKILL);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_FALSE(ProcessesWith(marker).empty()) << "the sandbox did not wait for the grace";
  for (int i = 0; i < Rounds(250) && !ProcessesWith(marker).empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(ProcessesWith(marker), IsEmpty()) << "the sandbox outlived its grace";

  std::unique_ptr<AgentProcess> restarted = StartAgent(setup, state_dir);
  ASSERT_NE(restarted, nullptr);
  EXPECT_THAT(restarted->Log(), HasSubstr("cleaned what a previous agent left"));
  EXPECT_THAT(AgentCgroups(old_pid), IsEmpty());
  EXPECT_THAT(CgroupsOf(sandbox->first), IsEmpty());
  EXPECT_TRUE(std::filesystem::is_empty(state_dir + "/sandboxes"));
  EXPECT_EQ(restarted->Node("GET", "/v1/sandboxes/" + sandbox->first).first, 404);
  restarted.reset();
  std::filesystem::remove_all(std::filesystem::path(state_dir).parent_path());
}

// The adopted sandbox is watched as before: a new probe (the old one is gone) answers its seccomp
// notifications (a forbidden call is still a violation event), and stopping that probe gets the
// sandbox declared compromised and recycled.
TEST_F(AdoptionE2eTest, AdoptedSandboxIsWatchedByANewProbe) {
  const AgentSetup setup{.heartbeat = "200ms", .restart_grace = "30s"};
  std::unique_ptr<AgentProcess> agent = StartAgent(setup);
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  std::vector<pid_t> old_probes;
  for (int i = 0; i < Rounds(200) && old_probes.empty(); ++i) {
    old_probes = ProbesOf(id);
    if (old_probes.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(old_probes.size(), 1u);
  const std::string state_dir = agent->state_dir();
  agent->KeepDirectory();
  agent->Kill(SIGKILL);

  std::unique_ptr<AgentProcess> restarted = StartAgent(setup, state_dir);
  ASSERT_NE(restarted, nullptr);
  std::vector<pid_t> probes;
  for (int i = 0; i < Rounds(200); ++i) {
    probes = ProbesOf(id);
    if (probes.size() == 1 && probes[0] != old_probes[0]) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_NE(probes[0], old_probes[0]) << "the old probe was kept";

  CommandRun run = restarted->Run(id, token, "unshare -U true; echo after=$?");
  EXPECT_EQ(run.stdout_text, "after=1\n");
  bool violation = false;
  for (int i = 0; i < Rounds(100) && !violation; ++i) {
    auto [code, events] = restarted->Node("GET", "/v1/events");
    for (const auto& e : events["events"]) {
      violation |= e["sandbox_id"] == id && e["type"] == "violation" && e["detail"] == "unshare";
    }
    if (!violation) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(violation) << "the new probe does not answer the sandbox's seccomp notifications";

  ASSERT_EQ(::kill(probes[0], SIGSTOP), 0);
  int status = 200;
  for (int i = 0; i < Rounds(100) && status == 200; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    status = restarted->Node("GET", "/v1/sandboxes/" + id).first;
  }
  EXPECT_EQ(status, 404) << "the adopted sandbox was not recycled when its probe stopped";
  EXPECT_THAT(restarted->Log(), HasSubstr(absl::StrCat("sandbox ", id, " is compromised")));
  restarted.reset();
  std::filesystem::remove_all(std::filesystem::path(state_dir).parent_path());
}

}  // namespace
}  // namespace moat::e2e
