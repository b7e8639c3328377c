// moat-agent end to end: the real daemon, real sandboxes, real HTTP on loopback; the host is
// checked after each scenario.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "e2e/agent/agent_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class AgentE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the agent makes real sandboxes: run as root";
    if (::access(AgentBinary().c_str(), X_OK) != 0) {
      FAIL() << "no moat-agent at " << AgentBinary();
    }
  }

  std::unique_ptr<AgentProcess> StartAgent(const AgentSetup& setup = {},
                                           const std::string& state_dir = "") {
    absl::StatusOr<std::unique_ptr<AgentProcess>> agent = AgentProcess::Start(setup, state_dir);
    EXPECT_TRUE(agent.ok()) << agent.status();
    return agent.ok() ? *std::move(agent) : nullptr;
  }
};

TEST_F(AgentE2eTest, RunsCommandsAndKeepsFilesBetweenThem) {
  std::unique_ptr<AgentProcess> agent = StartAgent();
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  CommandRun write = agent->Run(id, token, "echo kept > f.txt; id -u; hostname; echo oops >&2");
  EXPECT_EQ(write.http_status, 200);
  EXPECT_TRUE(write.completed) << write.error;
  EXPECT_EQ(write.stdout_text, "0\nmoat\n");
  EXPECT_EQ(write.stderr_text, "oops\n");
  CommandRun read = agent->Run(id, token, "cat /workspace/f.txt");
  EXPECT_EQ(read.stdout_text, "kept\n");
  // The host is not visible: no host process, no host file written.
  const std::string marker = absl::StrCat("/etc/moat-agent-e2e-", ::getpid());
  CommandRun escape = agent->Run(id, token, absl::StrCat("ps ax | wc -l; touch ", marker));
  EXPECT_FALSE(std::filesystem::exists(marker));
  int processes = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(escape.stdout_text.substr(0, escape.stdout_text.find('\n')), &processes))
      << escape.stdout_text;
  EXPECT_LE(processes, 5);  // header, init, sh, ps, wc
  // A failing command is an error event with its exit code, not a broken stream.
  CommandRun fails = agent->Run(id, token, "exit 3");
  EXPECT_EQ(fails.http_status, 200);
  EXPECT_THAT(fails.error, HasSubstr("3"));

  auto [status, deleted] = agent->Node("DELETE", "/v1/sandboxes/" + id);
  EXPECT_EQ(status, 200) << deleted.dump();
  EXPECT_TRUE(deleted["cleanup"]["residue"].empty()) << deleted.dump();
  EXPECT_EQ(deleted["cleanup"]["cgroups_removed"], 1);
  for (const std::string& cgroup : AgentCgroups(agent->pid())) {
    EXPECT_FALSE(absl::EndsWith(cgroup, id)) << cgroup;  // (the pool's own may exist)
  }
}

// The agent's own files are covered in every sandbox, even where the sandbox's root shows them
// readable (an agent pod's ConfigMap at /etc/moat): its config reads as empty inside and its
// token is covered (by /dev/null), while a file beside them stays as it is.
TEST_F(AgentE2eTest, TheAgentsOwnFilesAreHidden) {
  const std::string dir = absl::StrCat("/etc/moat-agent-e2e-", ::getpid());
  std::unique_ptr<AgentProcess> agent = StartAgent({.config_dir = dir});
  ASSERT_NE(agent, nullptr);
  const std::string neighbour = dir + "/neighbour.txt";
  {
    std::FILE* f = std::fopen(neighbour.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("not the agent's\n", f);
    std::fclose(f);
  }
  ASSERT_EQ(::chmod(neighbour.c_str(), 0644), 0);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, sandbox_token] = *sandbox;
  CommandRun read = agent->Run(id, sandbox_token,
                               absl::StrCat("cat ", dir, "/agent.yaml; echo read; cat ", neighbour,
                                            "; [ -c ", dir, "/token ] && echo token covered"));
  EXPECT_EQ(read.http_status, 200);
  EXPECT_EQ(read.stdout_text, "read\nnot the agent's\ntoken covered\n") << read.stderr_text;
  EXPECT_THAT(read.stdout_text, Not(HasSubstr("token_file")));
  EXPECT_THAT(read.stdout_text, Not(HasSubstr(agent->NodeToken())));
  agent.reset();
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST_F(AgentE2eTest, BadRequestsGetClearErrors) {
  std::unique_ptr<AgentProcess> agent = StartAgent();
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  // A new connection per request: an error answer may close the one before.
  std::unique_ptr<httplib::Client> client;
  auto fresh = [&] {
    client = agent->NewClient();
    return client.get();
  };
  fresh();
  const std::string base = absl::StrCat("/v1/sandboxes/", id, "/execd");
  httplib::Headers auth = {{"X-EXECD-ACCESS-TOKEN", token}};
  // Wrong token, another sandbox's token, the node token path with a sandbox token.
  auto r = fresh()->Post(base + "/command", {{"X-EXECD-ACCESS-TOKEN", "wrong"}},
                         R"({"command": "true"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = fresh()->Get("/v1/sandboxes", auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  // Malformed JSON and wrong types.
  r = fresh()->Post(base + "/command", auth, "{not json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr(R"("code":"INVALID_REQUEST")"));  // flat, as execd's ErrorResponse
  r = fresh()->Post(base + "/command", auth, R"({"command": 42})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  // ".." in file names is refused as text.
  for (const char* path : {"../../etc/passwd", "/workspace/../etc/shadow"}) {
    r = fresh()->Get(absl::StrCat(base, "/files/download?path=", path), auth);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
  }
  // Any path the sandbox sees can be read, and only as the sandbox reads it.
  r = fresh()->Get(base + "/files/download?path=/etc/passwd", auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->body, agent->Run(id, token, "cat /etc/passwd").stdout_text);
  // A symlink made inside to a host file does not lead out.
  agent->Run(id, token, "ln -s /etc/shadow leak");
  r = fresh()->Get(base + "/files/download?path=leak", auth);
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body, ::testing::Not(HasSubstr("root:")));
  // A huge body is refused before it is read whole.
  auto [status, body] = agent->Node("POST", "/v1/sandboxes", std::string(8 << 20, '{'));
  EXPECT_EQ(status, 413);
  // The agent is still fine.
  EXPECT_EQ(agent->Run(id, token, "echo alive").stdout_text, "alive\n");
}

// kill -9 of the agent while commands run, then a restart on the same state directory: no
// process, cgroup, mount or record of the old sandboxes may be left.
TEST_F(AgentE2eTest, KilledAgentLeavesNothingAfterRestart) {
  const HostSnapshot before = SnapshotHost();
  const std::string marker = absl::StrCat("7", ::getpid(), "13");  // sleep 1000.<marker>
  std::unique_ptr<AgentProcess> agent = StartAgent({.pool_floor = 1});
  ASSERT_NE(agent, nullptr);
  std::vector<std::pair<std::string, std::string>> sandboxes;
  for (int i = 0; i < 3; ++i) {
    auto sandbox = agent->CreateSandbox();
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    sandboxes.push_back(*sandbox);
    CommandRun bg =
        agent->Run(sandbox->first, sandbox->second,
                   absl::StrCat("sleep 1000.", marker, " & sleep 1000.", marker, "; echo never"),
                   nullptr, R"({"background": true})");
    EXPECT_EQ(bg.http_status, 200);
    agent->Run(sandbox->first, sandbox->second, "echo data > /workspace/keep.txt");
  }
  // Six sleeps and their three shells carry the marker.
  for (int i = 0; i < Rounds(100) && ProcessesWith(marker).size() < 9; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(ProcessesWith(marker).size(), 9u) << "the background commands did not start";
  const pid_t old_pid = agent->pid();
  ASSERT_FALSE(AgentCgroups(old_pid).empty());
  const std::string state_dir = agent->state_dir();
  agent->KeepDirectory();
  agent->Kill(SIGKILL);

  // Every sandbox dies with the agent (init exits when the agent's socket closes).
  for (int i = 0; i < Rounds(250) && !ProcessesWith(marker).empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(ProcessesWith(marker), IsEmpty());

  std::unique_ptr<AgentProcess> restarted = StartAgent({}, state_dir);
  ASSERT_NE(restarted, nullptr);
  EXPECT_THAT(restarted->Log(), HasSubstr("cleaned what a previous agent left"));
  // The old agent's cgroups and records are gone, and the host's mount table is as it was.
  EXPECT_THAT(AgentCgroups(old_pid), IsEmpty());
  EXPECT_TRUE(std::filesystem::is_empty(state_dir + "/sandboxes"));
  EXPECT_EQ(SnapshotHost().mounts, before.mounts);
  EXPECT_THAT(ProcessesWith(marker), IsEmpty());
  // Its sandboxes are unknown to the new agent.
  EXPECT_EQ(restarted->Node("GET", "/v1/sandboxes/" + sandboxes[0].first).first, 404);
  restarted.reset();
  std::filesystem::remove_all(std::filesystem::path(state_dir).parent_path());
}

// Without a restart grace a stop ends the agent's sandboxes before it exits, each deleted as a
// client's delete is (their processes, cgroups and mounts gone when the agent is), and says so.
TEST_F(AgentE2eTest, AStopWithoutGraceEndsEverySandboxAndSaysSo) {
  const HostSnapshot before = SnapshotHost();
  const std::string marker = absl::StrCat("7", ::getpid(), "17");  // sleep 1000.<marker>
  std::unique_ptr<AgentProcess> agent = StartAgent();
  ASSERT_NE(agent, nullptr);
  for (int i = 0; i < 2; ++i) {
    auto sandbox = agent->CreateSandbox();
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    EXPECT_EQ(agent
                  ->Run(sandbox->first, sandbox->second, absl::StrCat("sleep 1000.", marker),
                        nullptr, R"({"background": true})")
                  .http_status,
              200);
  }
  for (int i = 0; i < Rounds(100) && ProcessesWith(marker).size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(ProcessesWith(marker).size(), 2u) << "the background commands did not start";
  const pid_t pid = agent->pid();
  EXPECT_EQ(agent->Stop(), 0);
  EXPECT_THAT(agent->Log(), HasSubstr("stopping: ended 2 sandboxes (no restart_grace"));
  EXPECT_THAT(ProcessesWith(marker), IsEmpty());
  EXPECT_THAT(AgentCgroups(pid), IsEmpty());
  EXPECT_EQ(SnapshotHost().mounts, before.mounts);
}

// Many concurrent commands for a while: no failures, and no growth in the agent's descriptors
// or memory, in host mounts or in cgroups. MOAT_AGENT_LOAD_SECONDS sets the duration (120 s).
TEST_F(AgentE2eTest, LoadWithoutLeaks) {
  int seconds = 120;
  if (const char* env = std::getenv("MOAT_AGENT_LOAD_SECONDS")) absl::SimpleAtoi(env, &seconds);
  std::unique_ptr<AgentProcess> agent = StartAgent({.pool_floor = 2, .pool_ceiling = 4});
  ASSERT_NE(agent, nullptr);
  constexpr int kClients = 4;
  std::vector<std::pair<std::string, std::string>> sandboxes;
  for (int i = 0; i < kClients; ++i) {
    auto sandbox = agent->CreateSandbox();
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    sandboxes.push_back(*sandbox);
  }
  std::atomic<int> ok{0}, failed{0}, churned{0};
  std::string first_failure;
  std::mutex failure_mu;
  auto run_for = [&](absl::Duration duration) {
    std::vector<std::thread> threads;
    const absl::Time end = absl::Now() + duration;
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([&, c] {
        auto client = agent->NewClient();
        int n = 0;
        while (absl::Now() < end) {
          const auto& [id, token] = sandboxes[c];
          const std::string want = absl::StrCat(c, "-", n++);
          // Mixed work: output, files, a failing command, a short pipeline.
          CommandRun run = agent->Run(
              id, token, absl::StrCat("echo ", want, " > f; cat f; ls / | head -3 >/dev/null"),
              client.get());
          if (run.completed && run.stdout_text == want + "\n") {
            ++ok;
          } else {
            if (++failed == 1) {
              std::lock_guard<std::mutex> l(failure_mu);
              first_failure = absl::StrCat("status ", run.http_status, " out \"", run.stdout_text,
                                           "\" error ", run.error);
            }
          }
        }
      });
    }
    // Meanwhile, sandboxes are made and deleted (the pool refills).
    threads.emplace_back([&] {
      while (absl::Now() < end) {
        auto extra = agent->CreateSandbox();
        if (extra.ok()) {
          agent->Run(extra->first, extra->second, "true");
          if (agent->Node("DELETE", "/v1/sandboxes/" + extra->first).first == 200) ++churned;
        }
        absl::SleepFor(absl::Milliseconds(100));
      }
    });
    for (std::thread& t : threads) t.join();
  };
  // Warm up (allocator arenas, thread pools), then measure over the rest.
  run_for(absl::Seconds(std::max(2, seconds / 10)));
  const int fds_before = OpenFds(agent->pid());
  const long rss_before = RssKib(agent->pid());
  const HostSnapshot host_before = SnapshotHost();
  // Sandboxes with a cgroup (one directory per hierarchy each).
  auto cgroup_sandboxes = [&] {
    std::set<std::string> names;
    for (const std::string& path : AgentCgroups(agent->pid())) {
      names.insert(path.substr(path.rfind('/') + 1));
    }
    return names;
  };
  const size_t cgroups_before = cgroup_sandboxes().size();
  run_for(absl::Seconds(seconds));
  absl::SleepFor(Scaled(absl::Milliseconds(500)));  // the pool settles back to its target
  const HostSnapshot host_after = SnapshotHost();
  EXPECT_EQ(failed.load(), 0) << first_failure;
  EXPECT_GT(ok.load(), 100);
  EXPECT_GT(churned.load(), 5);
  EXPECT_LE(OpenFds(agent->pid()), fds_before + 4);
  EXPECT_LE(host_after.mounts, host_before.mounts);
  // Its own cgroups (other moat users on the host may come and go): the four sandboxes and
  // the pool, which may have grown by two sandboxes toward its ceiling.
  const std::set<std::string> cgroups_after = cgroup_sandboxes();
  EXPECT_LE(cgroups_after.size(), cgroups_before + 2) << absl::StrJoin(cgroups_after, "\n");
  EXPECT_LE(RssKib(agent->pid()), rss_before + 16 * 1024) << "KiB before: " << rss_before;
  std::printf("load: %d commands ok in %d s with %d clients (%.0f/s), %d sandboxes churned\n",
              ok.load(), seconds, kClients, ok.load() / static_cast<double>(seconds),
              churned.load());
}

// What the kernel refuses inside is reported from outside: each forbidden call is a violation
// event with the sandbox's id, and a metric; the command sees the call fail and goes on.
TEST_F(AgentE2eTest, ForbiddenSyscallsBecomeViolationEvents) {
  std::unique_ptr<AgentProcess> agent = StartAgent();
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox(
      R"({"profile": "default", "ttl_seconds": 600, "env": {"GREETING": "hello"}})");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  CommandRun run = agent->Run(
      id, token, "echo $GREETING; unshare -U true; mount -t tmpfs x /tmp; echo after=$?");
  EXPECT_EQ(run.stdout_text, "hello\nafter=32\n");  // the create-time env; mount failed
  std::set<std::string> seen;
  for (int i = 0; i < Rounds(100) && seen.size() < 2; ++i) {
    auto [code, events] = agent->Node("GET", "/v1/events");
    ASSERT_EQ(code, 200);
    for (const auto& e : events["events"]) {
      if (e["sandbox_id"] == id && e["type"] == "violation" && e["kind"] == "syscall") {
        seen.insert(e["detail"].get<std::string>());
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(seen, ::testing::UnorderedElementsAre("unshare", "mount"));
  EXPECT_THAT(agent->Metrics(), HasSubstr("moat_violations_total{kind=\"syscall\"} 2"));
}

// A command over the memory limit is killed by the kernel; its probe reports it as a memory
// violation, and the sandbox, its /workspace included, lives on for the next command.
TEST_F(AgentE2eTest, MemoryBombIsAViolationAndTheSandboxLivesOn) {
  std::unique_ptr<AgentProcess> agent = StartAgent({.heartbeat = "200ms"});
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  CommandRun bomb = agent->Run(
      id, token, "echo kept > /workspace/k; python3 -c 'x = bytearray(1 << 30)'; echo rc=$?");
  EXPECT_THAT(bomb.stdout_text, HasSubstr("rc=137"));  // SIGKILL from the OOM killer
  bool reported = false;
  for (int i = 0; i < Rounds(100) && !reported; ++i) {
    auto [code, events] = agent->Node("GET", "/v1/events");
    for (const auto& e : events["events"]) {
      reported |= e["sandbox_id"] == id && e["kind"] == "memory" &&
                  absl::StrContains(e["detail"].get<std::string>(), "OOM killer");
    }
    if (!reported) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(reported);
  EXPECT_EQ(agent->Run(id, token, "cat /workspace/k").stdout_text, "kept\n");
}

// A probe that stops answering (SIGSTOP) makes its sandbox compromised after three missed
// heartbeats: killed, recycled, reported as an event, a log line and a metric.
TEST_F(AgentE2eTest, StoppedProbeMeansCompromised) {
  std::unique_ptr<AgentProcess> agent = StartAgent({.heartbeat = "200ms"});
  ASSERT_NE(agent, nullptr);
  auto sandbox = agent->CreateSandbox();
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const auto& [id, token] = *sandbox;
  // posix_spawn returns once the probe's exec is past the point of no return, a moment before
  // its command line is readable in /proc: wait for it.
  std::vector<pid_t> probes;
  for (int i = 0; i < Rounds(200) && probes.empty(); ++i) {
    probes = ProbesOf(id);
    if (probes.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(probes.size(), 1u) << "no moat-probe process for " << id << "; agent log:\n"
                               << agent->Log();
  // The probe is outside the sandbox: the sandbox cannot see it.
  CommandRun look = agent->Run(id, token, "ps ax");
  EXPECT_THAT(look.stdout_text, ::testing::Not(HasSubstr("moat-probe")));
  const absl::Time stopped = absl::Now();
  ASSERT_EQ(::kill(probes[0], SIGSTOP), 0);
  int status = 200;
  for (int i = 0; i < Rounds(100) && status == 200; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    status = agent->Node("GET", "/v1/sandboxes/" + id).first;
  }
  const absl::Duration took = absl::Now() - stopped;
  EXPECT_EQ(status, 404) << "the sandbox was not recycled";
  EXPECT_GE(took, absl::Milliseconds(400));  // not before the misses
  EXPECT_LE(took, Scaled(absl::Seconds(3)));
  auto [code, events] = agent->Node("GET", "/v1/events");
  ASSERT_EQ(code, 200);
  bool compromised = false;
  for (const auto& e : events["events"]) {
    compromised |= e["type"] == "compromised" && e["sandbox_id"] == id;
  }
  EXPECT_TRUE(compromised) << events.dump();
  EXPECT_THAT(agent->Log(), HasSubstr(absl::StrCat("sandbox ", id, " is compromised")));
  EXPECT_THAT(agent->Metrics(), HasSubstr("moat_compromised_sandboxes_total 1"));
  for (const std::string& cgroup : AgentCgroups(agent->pid())) {
    EXPECT_FALSE(absl::EndsWith(cgroup, id)) << cgroup;  // (the pool's own may exist)
  }
  EXPECT_THAT(ProbesOf(id), IsEmpty());  // the stopped probe was killed and reaped
}

}  // namespace
}  // namespace moat::e2e
