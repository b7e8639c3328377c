#include "controller/sandboxes.h"

#include "absl/strings/str_cat.h"
#include "controller/store/memory_store.h"
#include "controller/testing/fake_agents.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/shell_command.h"

namespace moat::controller {
namespace {

using ::testing::HasSubstr;
constexpr uint64_t kGiB = 1ULL << 30;

class SandboxManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 1; i <= 3; ++i) Join(absl::StrCat("n", i), i == 3 ? "arm64" : "amd64");
  }
  void Join(const std::string& name, const std::string& arch) {
    NodeReport r;
    r.agent_url = "http://" + name;
    r.agent_token = "0123456789abcdef-" + name;
    r.arch = arch;
    r.allocatable = {2, 4 * kGiB, 0};
    r.profiles = {"default"};
    ASSERT_TRUE(nodes_.Join(name, r).ok());
  }
  Sandbox Spec(std::string id, scheduler::Resources resources = {1, 2 * kGiB, 0}) {
    Sandbox s;
    s.id = std::move(id);
    s.tenant = "acme";
    s.image = "python:3.11";
    s.profile = "default";
    s.entrypoint = {"/bin/sh"};
    s.resources = resources;
    s.expires_at = clock_.Now() + absl::Minutes(10);
    return s;
  }
  std::unique_ptr<SandboxManager> Manager() {
    return std::make_unique<SandboxManager>(
        &store_, &nodes_, &agents_, &scheduler_, &metrics_, &clock_,
        SandboxManagerOptions{.retries = 3,
                              .create_timeout = absl::Milliseconds(50),
                              .retry_interval = absl::Milliseconds(5)});
  }

  FakeClock clock_;
  MemoryStore store_;
  NodeTable nodes_{&clock_, NodeTableOptions{}};
  testing::FakeAgents agents_;
  scheduler::Scheduler scheduler_;
  ControllerMetrics metrics_;
};

TEST_F(SandboxManagerTest, CreateRunsAndStoresTheSandboxOnce) {
  auto m = Manager();
  auto s = m->Create(Spec("a"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state, "Running");
  EXPECT_FALSE(s->node.empty());
  EXPECT_EQ(agents_.Running("http://" + s->node), 1);
  auto stored = store_.Get("sandboxes/a");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(DecodeSandbox((*stored)->value)->agent_id, s->agent_id);
  EXPECT_EQ(*store_.Revision(), 1);  // One durable write for a create.
  ASSERT_TRUE(m->Delete("acme", "a").ok());
  EXPECT_EQ(*store_.Revision(), 2);  // And one for its delete.
  EXPECT_EQ(agents_.Running("http://" + s->node), 0);
  EXPECT_TRUE(absl::IsNotFound(m->Get("acme", "a").status()));
}

TEST_F(SandboxManagerTest, OtherTenantsSeeNothing) {
  auto m = Manager();
  ASSERT_TRUE(m->Create(Spec("a")).ok());
  EXPECT_TRUE(absl::IsNotFound(m->Get("other", "a").status()));
  EXPECT_TRUE(m->List("other").empty());
  EXPECT_TRUE(absl::IsNotFound(m->Delete("other", "a")));
  EXPECT_EQ(m->List("acme").size(), 1u);
}

// A client's id is quoted and escaped in the error (util/quote.h): a newline or a quote in it
// cannot forge a log line or end the quoted id early.
TEST_F(SandboxManagerTest, AnUnknownIdIsQuotedInTheError) {
  auto m = Manager();
  const std::string forged = "a\"\n[error] forged";
  EXPECT_EQ(m->Get("acme", forged).status(),
            absl::NotFoundError(R"(no sandbox "a\"\n[error] forged")"));
  EXPECT_EQ(m->GetForToken(forged, "token").status(),
            absl::NotFoundError(R"(no sandbox "a\"\n[error] forged" with this token)"));
}

TEST_F(SandboxManagerTest, AFailingAgentIsRetriedOnAnotherNode) {
  agents_.SetFailing("http://n1", true);
  agents_.SetFailing("http://n2", true);
  // n3 busier, so the scheduler tries the two failing nodes first.
  ASSERT_TRUE(nodes_.Reserve("n3", "other", {0.5, kGiB, 0}).ok());
  auto m = Manager();
  Sandbox spec = Spec("a");
  auto s = m->Create(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->node, "n3");
  EXPECT_EQ(agents_.Creates("http://n1") + agents_.Creates("http://n2"), 2);
  // Every node failing: an error that says so, nothing kept, nothing reserved.
  agents_.SetFailing("http://n3", true);
  auto failed = m->Create(Spec("b"));
  EXPECT_TRUE(absl::IsUnavailable(failed.status())) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("on 2 node(s); the last said: agent http://n"));
  EXPECT_TRUE(absl::IsNotFound(m->Get("acme", "b").status()));
  EXPECT_EQ(nodes_.Get("n1")->allocated.cpu, 0);
}

TEST_F(SandboxManagerTest, UnplaceableSandboxesStayPendingWithAReasonAndArePlacedLater) {
  auto m = Manager();
  scheduler::Resources huge{1, 3 * kGiB, 0};
  ASSERT_TRUE(m->Create(Spec("a", huge)).ok());
  ASSERT_TRUE(m->Create(Spec("b", huge)).ok());
  ASSERT_TRUE(m->Create(Spec("c", huge)).ok());
  auto pending = m->Create(Spec("d", huge));
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(pending->state, "Pending");
  EXPECT_EQ(pending->reason, "UNSCHEDULABLE");
  EXPECT_EQ(pending->message, "0/3 nodes: 3 insufficient memory");
  EXPECT_TRUE(store_.Get("sandboxes/d")->has_value());  // Acknowledged: stored.
  m->RetryPending();
  EXPECT_EQ(m->Get("acme", "d")->state, "Pending");
  ASSERT_TRUE(m->Delete("acme", "a").ok());
  m->RetryPending();
  EXPECT_EQ(m->Get("acme", "d")->state, "Running");
}

// The controller that answered Pending is gone (a restart, a failover): the next one loads the
// sandbox from the store and places it once capacity appears; a delete forgets it.
TEST_F(SandboxManagerTest, APendingSandboxSurvivesTheControllerAndIsPlacedByTheNext) {
  scheduler::Resources huge{1, 3 * kGiB, 0};
  {
    auto first = Manager();
    for (const char* id : {"a", "b", "c", "d", "e"})
      ASSERT_TRUE(first->Create(Spec(id, huge)).ok());
    ASSERT_EQ(first->Get("acme", "d")->state, "Pending");
  }
  auto next = Manager();
  ASSERT_TRUE(next->Load().ok());
  EXPECT_EQ(next->Pending(), 2);
  EXPECT_EQ(next->Get("acme", "d")->reason, "UNSCHEDULABLE");
  // A Pending sandbox nobody is placing can be deleted (its create answered long ago).
  ASSERT_TRUE(next->Delete("acme", "e").ok());
  EXPECT_FALSE(store_.Get("sandboxes/e")->has_value());
  ASSERT_TRUE(next->Delete("acme", "a").ok());
  next->RetryPending();
  auto d = next->Get("acme", "d");
  ASSERT_EQ(d->state, "Running");
  EXPECT_EQ(DecodeSandbox((*store_.Get("sandboxes/d"))->value)->state, "Running");
  int runs = 0;
  for (const char* node : {"n1", "n2", "n3"})
    runs += agents_.Running(absl::StrCat("http://", node));
  EXPECT_EQ(runs, 3);  // b, c and d: e never ran.
}

// A leader placed a stored Pending sandbox on an agent and died before storing it Running. The
// next leader places it again: the dead leader's copy (another attempt) is an orphan, so the
// sandbox runs once; the copy of the attempt in flight is kept.
TEST_F(SandboxManagerTest, APlacementADeadLeaderStartedDoesNotRunTwice) {
  scheduler::Resources huge{1, 3 * kGiB, 0};
  auto m = Manager();
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_TRUE(m->Create(Spec(id, huge)).ok());
  ASSERT_EQ(m->Get("acme", "d")->state, "Pending");
  ASSERT_TRUE(m->Delete("acme", "a").ok());
  std::string free_node;
  for (const char* n : {"n1", "n2", "n3"}) {
    if (agents_.Running(absl::StrCat("http://", n)) == 0) free_node = n;
  }
  ASSERT_FALSE(free_node.empty());
  const std::string url = "http://" + free_node;
  agents_.AddOrphan(url, "d", "attempt-of-the-dead-leader");
  agents_.AddOrphan(url, "d");  // From a controller before attempts were tagged.
  ASSERT_TRUE(m->Reconcile(free_node).ok());
  EXPECT_EQ(agents_.Running(url), 0) << "a Pending sandbox's copy from another attempt stayed";
  // Reconciled while this controller's own create is on the agent but not answered yet.
  int during = -1;
  agents_.SetAfterCreate([&](const std::string& at) {
    ASSERT_TRUE(m->Reconcile(at.substr(std::string("http://").size())).ok());
    during = agents_.Running(at);
  });
  m->RetryPending();
  EXPECT_EQ(during, 1) << "the attempt in flight was deleted as an orphan";
  ASSERT_EQ(m->Get("acme", "d")->state, "Running");
  EXPECT_EQ(agents_.Running(url), 1);
  ASSERT_TRUE(m->Reconcile(free_node).ok());
  EXPECT_EQ(agents_.Running(url), 1);
  EXPECT_EQ(m->Get("acme", "d")->state, "Running");
}

TEST_F(SandboxManagerTest, ALostNodesSandboxesFailWithNodeLost) {
  auto m = Manager();
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    auto s = m->Create(Spec(absl::StrCat("s", i), {0.5, kGiB / 2, 0}));
    ASSERT_TRUE(s.ok());
  }
  auto before = m->List("acme");
  std::string node = before[0].node;
  m->NodeLost(node);
  int failed = 0;
  for (const Sandbox& s : m->List("acme")) {
    if (s.node == node) {
      EXPECT_EQ(s.state, "Failed");
      EXPECT_EQ(s.reason, "NODE_LOST");
      ++failed;
      EXPECT_EQ(DecodeSandbox((*store_.Get("sandboxes/" + s.id))->value)->reason, "NODE_LOST");
    } else {
      EXPECT_EQ(s.state, "Running");
    }
  }
  EXPECT_GE(failed, 1);
}

TEST_F(SandboxManagerTest, ReconcileDeletesOrphansAndFailsTheMissing) {
  auto m = Manager();
  auto s = m->Create(Spec("a"));
  ASSERT_TRUE(s.ok());
  std::string url = "http://" + s->node;
  agents_.AddOrphan(url, "never-acknowledged");
  ASSERT_TRUE(m->Reconcile(s->node).ok());
  EXPECT_EQ(agents_.Running(url), 1);  // The orphan is gone, the known one stays.
  EXPECT_EQ(m->Get("acme", "a")->state, "Running");
  agents_.Vanish(url);
  ASSERT_TRUE(m->Reconcile(s->node).ok());
  EXPECT_EQ(m->Get("acme", "a")->state, "Failed");
  EXPECT_EQ(m->Get("acme", "a")->reason, "SANDBOX_MISSING");
}

TEST_F(SandboxManagerTest, ARestartedManagerKnowsWhatWasAcknowledged) {
  {
    auto m = Manager();
    ASSERT_TRUE(m->Create(Spec("a")).ok());
  }
  auto m = Manager();
  ASSERT_TRUE(m->Load().ok());
  EXPECT_EQ(m->Get("acme", "a")->state, "Running");
}

TEST_F(SandboxManagerTest, RenewNeedsAnExpiryAndAFutureTime) {
  auto m = Manager();
  auto s = m->Create(Spec("a"));
  ASSERT_TRUE(s.ok());
  absl::Time later = clock_.Now() + absl::Hours(1);
  auto renewed = m->Renew("acme", "a", later);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(agents_.Ttl(s->agent_id), absl::Hours(1) + absl::Minutes(1));
  EXPECT_TRUE(absl::IsInvalidArgument(m->Renew("acme", "a", clock_.Now()).status()));
  Sandbox forever = Spec("b");
  forever.expires_at = absl::InfiniteFuture();
  ASSERT_TRUE(m->Create(forever).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(m->Renew("acme", "b", later).status()));
}

TEST_F(SandboxManagerTest, ExpiredSandboxesAreDeleted) {
  auto m = Manager();
  auto s = m->Create(Spec("a"));
  ASSERT_TRUE(s.ok());
  clock_.Advance(absl::Minutes(11));
  m->Tick();
  EXPECT_TRUE(absl::IsNotFound(m->Get("acme", "a").status()));
  EXPECT_EQ(agents_.Running("http://" + s->node), 0);
}

TEST_F(SandboxManagerTest, MetadataMergePatch) {
  auto m = Manager();
  Sandbox spec = Spec("a");
  spec.metadata = {{"k", "v"}, {"gone", "x"}};
  ASSERT_TRUE(m->Create(spec).ok());
  auto s = m->PatchMetadata("acme", "a", {{"new", "1"}, {"gone", std::nullopt}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->metadata, (std::map<std::string, std::string>{{"k", "v"}, {"new", "1"}}));
}

TEST_F(SandboxManagerTest, ListIsNewestFirst) {
  auto m = Manager();
  ASSERT_TRUE(m->Create(Spec("old", {0.1, 1, 0})).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(m->Create(Spec("new", {0.1, 1, 0})).ok());
  auto list = m->List("acme");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, "new");
}

TEST_F(SandboxManagerTest, TheEntrypointStartsBeforeTheCreateAnswers) {
  auto m = Manager();
  Sandbox spec = Spec("a");
  spec.entrypoint = {"tail", "-f", "/dev/null"};
  spec.env = {{"GREETING", "hi"}};
  auto s = m->Create(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_FALSE(s->entrypoint_command.empty());
  EXPECT_EQ(s->entrypoint_command, agents_.LastStarted());
  AgentCommand started = agents_.StartedCommand(s->entrypoint_command);
  EXPECT_EQ(started.command, "exec 'tail' '-f' '/dev/null'");
  EXPECT_EQ(started.env.at("GREETING"), "hi");
  // Stored with the sandbox, in the create's one write: a restarted controller still watches it.
  EXPECT_EQ(*store_.Revision(), 1);
  EXPECT_EQ(DecodeSandbox((*store_.Get("sandboxes/a"))->value)->entrypoint_command,
            s->entrypoint_command);
  // POST /v1/run's sandboxes run their command, not an entrypoint.
  Sandbox run = Spec("r");
  auto ran = m->Run(run, AgentCommand{.command = "true"});
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(agents_.LastStarted(), s->entrypoint_command);
}

// The agent checks and starts the entrypoint in its create: one call, where an agent without
// that field takes three (the check, its status with it, the start).
TEST_F(SandboxManagerTest, ACreateWithAnEntrypointIsOneAgentCall) {
  auto m = Manager();
  Sandbox spec = Spec("a");
  spec.entrypoint = {"tail", "-f", "/dev/null"};
  spec.env = {{"GREETING", "hi"}};
  const int before = agents_.Calls();
  auto s = m->Create(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(agents_.Calls() - before, 1);
  EXPECT_EQ(agents_.LastCreate().entrypoint, spec.entrypoint);
  EXPECT_EQ(agents_.LastCreate().env.at("GREETING"), "hi");
  ASSERT_FALSE(s->entrypoint_command.empty());
  EXPECT_EQ(agents_.StartedCommand(s->entrypoint_command).command, "exec 'tail' '-f' '/dev/null'");
  // A POST /v1/run sandbox runs its command, not an entrypoint: the agent is not asked to.
  ASSERT_TRUE(m->Run(Spec("r"), AgentCommand{.command = "true"}).ok());
  EXPECT_TRUE(agents_.LastCreate().entrypoint.empty());
}

TEST_F(SandboxManagerTest, AnAgentOlderThanTheEntrypointFieldGetsItThroughExecd) {
  agents_.SetOldAgents(true);
  auto m = Manager();
  Sandbox spec = Spec("a");
  spec.entrypoint = {"tail", "-f", "/dev/null"};
  const int before = agents_.Calls();
  auto s = m->Create(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(agents_.Calls() - before, 3);
  EXPECT_EQ(agents_.LastCommand().command, EntrypointCheckCommand("tail"));
  ASSERT_FALSE(s->entrypoint_command.empty());
  EXPECT_EQ(agents_.StartedCommand(s->entrypoint_command).command, "exec 'tail' '-f' '/dev/null'");
}

TEST_F(SandboxManagerTest, AnEntrypointTheSandboxCannotRunFailsTheCreate) {
  for (bool old_agents : {false, true}) {
    SCOPED_TRACE(old_agents ? "agents older than the entrypoint field" : "agents of today");
    agents_.SetOldAgents(old_agents);
    AgentCommandResult not_found;
    not_found.status = "exited";
    not_found.exit_code = 127;
    agents_.SetCommandResult(not_found);
    auto m = Manager();
    Sandbox spec = Spec("a");
    spec.entrypoint = {"/no/such/program"};
    const int creates =
        agents_.Creates("http://n1") + agents_.Creates("http://n2") + agents_.Creates("http://n3");
    auto s = m->Create(spec);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
    EXPECT_EQ(s.status().message(), EntrypointNotRunnableMessage("/no/such/program"));
    EXPECT_THAT(agents_.LastCommand().command, HasSubstr("'/no/such/program'"));
    // Asked of one node only: every other would refuse it alike.
    EXPECT_EQ(agents_.Creates("http://n1") + agents_.Creates("http://n2") +
                  agents_.Creates("http://n3") - creates,
              1);
    // Nothing kept: not on the agent, not reserved, not stored.
    for (const char* n : {"n1", "n2", "n3"}) {
      EXPECT_EQ(agents_.Running(absl::StrCat("http://", n)), 0) << n;
      EXPECT_EQ(nodes_.Get(n)->allocated.cpu, 0) << n;
    }
    EXPECT_TRUE(absl::IsNotFound(m->Get("acme", "a").status()));
    EXPECT_FALSE(store_.Get("sandboxes/a")->has_value());
    EXPECT_TRUE(agents_.LastStarted().empty());
  }
}

TEST_F(SandboxManagerTest, TheSandboxEndsWithItsEntrypoint) {
  auto m = Manager();
  auto a = m->Create(Spec("a"));
  auto b = m->Create(Spec("b"));
  auto c = m->Create(Spec("c"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  agents_.EndCommand(a->entrypoint_command, 0);
  agents_.EndCommand(b->entrypoint_command, 3);
  // Not looked at before an interval has passed since the sandbox started.
  m->Tick();
  EXPECT_EQ(agents_.StateReads(), 0);
  clock_.Advance(absl::Seconds(3));
  m->Tick();
  EXPECT_EQ(agents_.StateReads(), 3);
  auto got = m->Get("acme", "a");
  EXPECT_EQ(got->state, "Terminated");
  EXPECT_EQ(got->reason, "CONTAINER_EXITED");
  got = m->Get("acme", "b");
  EXPECT_EQ(got->state, "Failed");
  EXPECT_EQ(got->reason, "CONTAINER_EXITED_ERROR");
  EXPECT_THAT(got->message, HasSubstr("exited with code 3"));
  EXPECT_EQ(m->Get("acme", "c")->state, "Running");
  // Gone from their agents, their reservations released, the end stored.
  EXPECT_EQ(agents_.Running("http://" + a->node) + agents_.Running("http://" + b->node) +
                agents_.Running("http://" + c->node),
            1);
  EXPECT_EQ(DecodeSandbox((*store_.Get("sandboxes/b"))->value)->state, "Failed");
  // A paused sandbox is not ended (its entrypoint is frozen, not gone).
  ASSERT_TRUE(m->Pause("acme", "c").ok());
  agents_.EndCommand(c->entrypoint_command, 0);
  clock_.Advance(absl::Seconds(3));
  m->Tick();
  EXPECT_EQ(m->Get("acme", "c")->state, "Paused");
  // Deleting the ended ones works and frees their records.
  EXPECT_TRUE(m->Delete("acme", "a").ok());
  EXPECT_TRUE(absl::IsNotFound(m->Get("acme", "a").status()));
}

}  // namespace
TEST_F(SandboxManagerTest, PauseAndResumeGoThroughTheAgentAndAreStored) {
  auto m = Manager();
  auto s = m->Create(Spec("a"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(m->Resume("acme", "a").status().message(), HasSubstr("only a Paused sandbox"));
  EXPECT_TRUE(absl::IsNotFound(m->Pause("other", "a").status()));
  auto paused = m->Pause("acme", "a");
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_EQ(paused->state, "Paused");
  EXPECT_TRUE(agents_.Paused(s->agent_id));
  EXPECT_EQ(DecodeSandbox((*store_.Get("sandboxes/a"))->value)->state, "Paused");
  EXPECT_TRUE(absl::IsFailedPrecondition(m->Pause("acme", "a").status()));
  // A paused sandbox may be renewed and still counts as on its node.
  EXPECT_TRUE(m->Renew("acme", "a", clock_.Now() + absl::Minutes(20)).ok());
  auto resumed = m->Resume("acme", "a");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->state, "Running");
  EXPECT_FALSE(agents_.Paused(s->agent_id));
  EXPECT_EQ(DecodeSandbox((*store_.Get("sandboxes/a"))->value)->state, "Running");
}

TEST_F(SandboxManagerTest, AFailedPauseLeavesTheSandboxRunning) {
  auto m = Manager();
  auto s = m->Create(Spec("a"));
  ASSERT_TRUE(s.ok()) << s.status();
  agents_.SetFailing("http://" + s->node, true);
  auto paused = m->Pause("acme", "a");
  EXPECT_TRUE(absl::IsUnavailable(paused.status())) << paused.status();
  EXPECT_THAT(paused.status().message(), HasSubstr("still Running"));
  EXPECT_EQ(m->Get("acme", "a")->state, "Running");
}

TEST_F(SandboxManagerTest, DeletingAPausedSandboxDeletesItOnTheAgent) {
  auto m = Manager();
  auto s = m->Create(Spec("a"));
  ASSERT_TRUE(s.ok() && m->Pause("acme", "a").ok());
  ASSERT_TRUE(m->Delete("acme", "a").ok());
  EXPECT_EQ(agents_.Running("http://" + s->node), 0);
  EXPECT_EQ(nodes_.Get(s->node)->allocated.cpu, 0);
}

TEST_F(SandboxManagerTest, DrainEndsTheNodesSandboxesAndSaysWhy) {
  auto m = Manager();
  auto a = m->Create(Spec("a"));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(m->Pause("acme", "a").ok());
  auto report = m->Drain(a->node, absl::ZeroDuration());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->ended, ::testing::ElementsAre("a"));
  EXPECT_TRUE(nodes_.Get(a->node)->draining);
  EXPECT_EQ(agents_.Running("http://" + a->node), 0);
  auto got = m->Get("acme", "a");
  EXPECT_EQ(got->state, "Failed");
  EXPECT_EQ(got->reason, "NODE_DRAINED");
  EXPECT_EQ(DecodeSandbox((*store_.Get("sandboxes/a"))->value)->reason, "NODE_DRAINED");
  EXPECT_EQ(nodes_.Get(a->node)->allocated.cpu, 0);
  // New sandboxes go elsewhere.
  auto b = m->Create(Spec("b"));
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->node, a->node);
  EXPECT_TRUE(absl::IsNotFound(m->Drain("nope", absl::ZeroDuration()).status()));
}

TEST_F(SandboxManagerTest, DrainWithAGracePeriodEndsThemWhenItIsOver) {
  auto m = Manager();
  auto a = m->Create(Spec("a"));
  ASSERT_TRUE(a.ok());
  auto report = m->Drain(a->node, absl::Seconds(30));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ended.empty());
  EXPECT_EQ(report->remaining, 1);
  m->Tick();
  EXPECT_EQ(m->Get("acme", "a")->state, "Running");
  clock_.Advance(absl::Seconds(31));
  m->Tick();
  EXPECT_EQ(m->Get("acme", "a")->reason, "NODE_DRAINED");
  EXPECT_EQ(agents_.Running("http://" + a->node), 0);
}

TEST_F(SandboxManagerTest, AnUncordonCallsOffAPendingDrain) {
  auto m = Manager();
  auto a = m->Create(Spec("a"));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(m->Drain(a->node, absl::Seconds(30)).ok());
  ASSERT_TRUE(nodes_.SetCordoned(a->node, false).ok());
  clock_.Advance(absl::Seconds(31));
  m->Tick();
  EXPECT_EQ(m->Get("acme", "a")->state, "Running");
}

TEST_F(SandboxManagerTest, ReconcileDeletesWhatStillRunsOfAFailedSandbox) {
  auto m = Manager();
  auto a = m->Create(Spec("a"));
  ASSERT_TRUE(a.ok());
  m->NodeLost(a->node);  // Failed, NODE_LOST; the agent (back) still runs it.
  ASSERT_EQ(agents_.Running("http://" + a->node), 1);
  ASSERT_TRUE(m->Reconcile(a->node).ok());
  EXPECT_EQ(agents_.Running("http://" + a->node), 0);
  EXPECT_EQ(m->Get("acme", "a")->reason, "NODE_LOST");
}

TEST_F(SandboxManagerTest, LimitsTighterThanTheProfileAndEgressReachTheAgent) {
  NodeReport r;
  r.agent_url = "http://p1";
  r.agent_token = "0123456789abcdef-p1";
  r.arch = "amd64";
  r.allocatable = {2, 4 * kGiB, 0};
  r.profiles = {"python"};
  r.profile_limits["python"] = {1, 1 * kGiB, 0};
  ASSERT_TRUE(nodes_.Join("p1", r).ok());
  auto m = Manager();
  Sandbox spec = Spec("a", {0.5, 256 << 20, 0});
  spec.profile = "python";
  spec.limit_cpus = 0.5;
  spec.limit_memory = 2 * kGiB;  // Looser than the profile's: the profile's holds, not sent.
  spec.egress_allow = {"pypi.org"};
  spec.egress_deny = {"evil.pypi.org"};
  ASSERT_TRUE(m->Create(spec).ok());
  AgentCreate sent = agents_.LastCreate();
  EXPECT_EQ(sent.cpus, 0.5);
  EXPECT_EQ(sent.memory_bytes, 0u);
  EXPECT_EQ(sent.policy["network"]["allowedDomains"], nlohmann::json({"pypi.org"}));
  EXPECT_EQ(sent.policy["network"]["deniedDomains"], nlohmann::json({"evil.pypi.org"}));
  // At the profile's limits and without a policy: nothing sent, so the warm pool serves it.
  Sandbox plain = Spec("b", {0.5, 256 << 20, 0});
  plain.profile = "python";
  plain.limit_cpus = 1;
  plain.limit_memory = 1 * kGiB;
  ASSERT_TRUE(m->Create(plain).ok());
  sent = agents_.LastCreate();
  EXPECT_EQ(sent.cpus, 0);
  EXPECT_EQ(sent.memory_bytes, 0u);
  EXPECT_TRUE(sent.policy.is_null());
}

TEST_F(SandboxManagerTest, CreateToReadyIsLabelledWarmOrCold) {
  auto m = Manager();
  ASSERT_TRUE(m->Create(Spec("a")).ok());  // The fake agent: warm without limits or policy.
  Sandbox cold = Spec("b");
  cold.egress_allow = {"example.com"};
  ASSERT_TRUE(m->Create(cold).ok());
  Sandbox cold2 = Spec("c");
  cold2.egress_allow = {"example.com"};
  ASSERT_TRUE(m->Create(cold2).ok());
  std::string text = metrics_.Serialize();
  EXPECT_THAT(text, HasSubstr("moat_controller_create_to_ready_seconds_count{start=\"warm\"} 1"));
  EXPECT_THAT(text, HasSubstr("moat_controller_create_to_ready_seconds_count{start=\"cold\"} 2"));
}

TEST_F(SandboxManagerTest, RunPlacesRunsAndDeletesWithoutAStoreWrite) {
  auto m = Manager();
  Sandbox spec = Spec("r");
  auto result = m->Run(spec, AgentCommand{"echo hi", {}, absl::Seconds(5)});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->stdout_text, "echo hi\n");
  EXPECT_EQ(agents_.LastCommand().timeout, absl::Seconds(5));
  EXPECT_EQ(*store_.Revision(), 0);  // Never stored.
  EXPECT_TRUE(absl::IsNotFound(m->Get("acme", "r").status()));
  for (const char* n : {"n1", "n2", "n3"}) {
    EXPECT_EQ(agents_.Running(absl::StrCat("http://", n)), 0) << n;
    EXPECT_EQ(nodes_.Get(n)->allocated.cpu, 0) << n;
  }
}

TEST_F(SandboxManagerTest, ARunThatFitsNowhereLeavesNothingPending) {
  auto m = Manager();
  auto result = m->Run(Spec("r", {64, kGiB, 0}), AgentCommand{"true"});
  EXPECT_TRUE(absl::IsResourceExhausted(result.status())) << result.status();
  EXPECT_EQ(m->Pending(), 0);
  EXPECT_TRUE(m->List("acme").empty());
}

TEST_F(SandboxManagerTest, ASandboxThatLandsOnANodeWhileItIsDrainedIsEndedToo) {
  auto m = Manager();
  // The node is drained while its agent is creating: the create still lands there.
  agents_.SetOnCreate([&](const std::string& url) {
    ASSERT_TRUE(m->Drain(url.substr(std::string("http://").size()), absl::ZeroDuration()).ok());
  });
  auto late = m->Create(Spec("late"));
  ASSERT_TRUE(late.ok()) << late.status();
  ASSERT_EQ(late->state, "Running");
  m->Tick();  // The drain goes on until the node is uncordoned.
  EXPECT_EQ(m->Get("acme", "late")->reason, "NODE_DRAINED");
  EXPECT_EQ(agents_.Running("http://" + late->node), 0);
}

}  // namespace moat::controller
