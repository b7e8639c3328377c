#include "controller/lifecycle_json.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(QuantityTest, KubernetesCpuAndMemory) {
  EXPECT_EQ(*ParseCpuQuantity("500m"), 0.5);
  EXPECT_EQ(*ParseCpuQuantity("2"), 2);
  EXPECT_EQ(*ParseCpuQuantity("1.5"), 1.5);
  EXPECT_FALSE(ParseCpuQuantity("-1").ok());
  EXPECT_FALSE(ParseCpuQuantity("0").ok());
  EXPECT_FALSE(ParseCpuQuantity("2000").ok());
  EXPECT_FALSE(ParseCpuQuantity("one").ok());
  EXPECT_EQ(*ParseMemoryQuantity("512Mi"), 512ULL << 20);
  EXPECT_EQ(*ParseMemoryQuantity("2Gi"), 2ULL << 30);
  EXPECT_EQ(*ParseMemoryQuantity("1G"), 1000000000ULL);
  EXPECT_EQ(*ParseMemoryQuantity("4096"), 4096ULL);
  EXPECT_FALSE(ParseMemoryQuantity("1Xi").ok());
  EXPECT_FALSE(ParseMemoryQuantity("").ok());
  EXPECT_FALSE(ParseMemoryQuantity("nan").ok());
}

TEST(CreateSandboxTest, DefaultsAndMappings) {
  ControllerConfig config;
  config.images = {{"python:*", "python"}, {"*", "default"}};
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  auto s = ParseCreateSandbox(R"({"image": {"uri": "python:3.11"}, "entrypoint": ["python"],
                                  "env": {"A": "1"}, "metadata": {"m": "v"},
                                  "platform": {"os": "linux", "arch": "arm64"}})",
                              config, now);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->profile, "python");
  EXPECT_EQ(s->arch, "aarch64");
  EXPECT_EQ(s->expires_at, now + absl::Minutes(10));
  EXPECT_EQ(s->resources.cpu, 1);  // The SDK's default request.
  EXPECT_EQ(s->resources.memory, 2ULL << 30);
  EXPECT_EQ(s->env.at("A"), "1");
  auto requested = ParseCreateSandbox(
      R"({"image": {"uri": "x"}, "entrypoint": ["sh"], "resourceLimits": {"cpu": "2"},
          "resourceRequests": {"cpu": "250m", "memory": "256Mi"}})",
      config, now);
  ASSERT_TRUE(requested.ok()) << requested.status();
  EXPECT_EQ(requested->resources.cpu, 0.25);  // Requests, not limits, are reserved.
  EXPECT_EQ(requested->resources.memory, 256ULL << 20);
  auto forever = ParseCreateSandbox(
      R"({"image": {"uri": "x"}, "entrypoint": ["sh"], "timeout": null})", config, now);
  ASSERT_TRUE(forever.ok());
  EXPECT_EQ(forever->expires_at, absl::InfiniteFuture());
  EXPECT_EQ(SandboxJson(*forever).contains("expiresAt"), false);
}

TEST(CreateSandboxTest, RefusesWhatItCannotHonour) {
  ControllerConfig config;
  config.images = {{"*", "default"}};
  auto error = [&](const std::string& body) {
    auto s = ParseCreateSandbox(body, config, absl::Now());
    EXPECT_FALSE(s.ok()) << body;
    return std::string(s.status().message());
  };
  EXPECT_THAT(error(R"({"entrypoint": ["sh"]})"), HasSubstr("\"image\" is required"));
  EXPECT_THAT(error(R"({"image": {"uri": "x"}})"), HasSubstr("\"entrypoint\" is required"));
  EXPECT_THAT(error(R"({"image": {"uri": "x"}, "entrypoint": ["sh"], "snapshotId": "s"})"),
              HasSubstr("not supported"));
  EXPECT_THAT(error(R"({"image": {"uri": "x"}, "entrypoint": ["sh"],
                        "resourceLimits": {"gpu": "1"}})"),
              HasSubstr("resourceLimits.gpu"));
  EXPECT_THAT(error(R"({"image": {"uri": "x"}, "entrypoint": ["sh"],
                        "platform": {"os": "linux", "arch": "riscv64"}})"),
              HasSubstr("\"amd64\" or \"arm64\""));
  EXPECT_THAT(error(R"({"image": {"uri": "x"}, "entrypoint": [1]})"), HasSubstr("strings"));
  EXPECT_THAT(error(R"({"image": {"uri": "x"}, "entrypoint": ["sh"], "env": {"A": 1}})"),
              HasSubstr("\"env.A\" must be a string"));
  EXPECT_THAT(error("[]"), HasSubstr("JSON object"));
}

TEST(ListTest, StateOrMetadataAndPages) {
  std::vector<Sandbox> all;
  for (int i = 0; i < 5; ++i) {
    Sandbox s;
    s.id = std::to_string(i);
    s.state = i < 3 ? "Running" : "Failed";
    s.metadata = {{"team", i % 2 ? "a" : "b"}, {"env", "prod"}};
    all.push_back(s);
  }
  std::multimap<std::string, std::string> params = {
      {"state", "running"}, {"state", "Failed"}, {"pageSize", "2"}, {"page", "2"}};
  json page = ListJson(all, *ParseListQuery(params));
  EXPECT_EQ(page["pagination"]["totalItems"], 5);
  EXPECT_EQ(page["pagination"]["totalPages"], 3);
  EXPECT_EQ(page["pagination"]["hasNextPage"], true);
  ASSERT_EQ(page["items"].size(), 2u);
  EXPECT_EQ(page["items"][0]["id"], "2");
  page = ListJson(all, *ParseListQuery({{"metadata", "team=a&env=prod"}}));
  EXPECT_EQ(page["pagination"]["totalItems"], 2);
  page = ListJson(all, *ParseListQuery({{"state", "Failed"}, {"metadata", "team=a"}}));
  EXPECT_EQ(page["pagination"]["totalItems"], 1);
  EXPECT_FALSE(ParseListQuery({{"pageSize", "0"}}).ok());
  EXPECT_FALSE(ParseListQuery({{"colour", "red"}}).ok());
}

TEST(JoinRequestTest, StrictAndWithoutTheToken) {
  auto j = ParseJoinRequest(R"({"name": "n1", "nonce": "0123456789abcdef", "timestamp": 1,
      "proof": "p", "report": {"agent_url": "http://a:1", "agent_token": "secret", "arch": "arm64"}})");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_TRUE(j->report.agent_token.empty());
  EXPECT_FALSE(ParseJoinRequest(R"({"name": "N/1", "nonce": "0123456789abcdef", "timestamp": 1,
      "proof": "p", "report": {"agent_url": "http://a:1", "arch": "x"}})")
                   .ok());
  EXPECT_FALSE(ParseHeartbeat(R"({"report": {"agent_url": "ftp://a", "arch": "x"}})").ok());
  EXPECT_FALSE(
      ParseHeartbeat(R"({"report": {"agent_url": "http://a", "arch": "x", "bogus": 1}})").ok());
  auto plain = ParseHeartbeat(R"({"report": {"agent_url": "http://a", "arch": "x"}})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->away, absl::ZeroDuration());
  auto away = ParseHeartbeat(
      R"({"report": {"agent_url": "http://a", "arch": "x"}, "away_for_seconds": 60})");
  ASSERT_TRUE(away.ok()) << away.status();
  EXPECT_EQ(away->away, absl::Seconds(60));
  for (const char* bad : {"0", "3601", "1.5", "\"60\"", "-1"}) {
    EXPECT_FALSE(
        ParseHeartbeat(absl::StrCat(R"({"report": {"agent_url": "http://a", "arch": "x"},)",
                                    R"( "away_for_seconds": )", bad, "}"))
            .ok())
        << bad;
  }
}

}  // namespace
TEST(CreateSandboxTest, NetworkPolicyBecomesMoatsEgressPolicy) {
  ControllerConfig config;
  config.images = {{"*", "default"}};
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  auto parse = [&](const std::string& policy) {
    return ParseCreateSandbox(
        absl::StrCat(R"({"image": {"uri": "x"}, "entrypoint": ["sh"], "networkPolicy": )", policy,
                     "}"),
        config, now);
  };
  auto s = parse(R"({"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"},
                    {"action": "allow", "target": "*.github.com"},
                    {"action": "deny", "target": "evil.github.com"}]})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->egress_allow, (std::vector<std::string>{"pypi.org", "*.github.com"}));
  EXPECT_EQ(s->egress_deny, std::vector<std::string>{"evil.github.com"});
  EXPECT_TRUE(parse("{}")->egress_allow.empty());
  EXPECT_TRUE(parse("null")->egress_allow.empty());
  // Fail closed: moat never allows everything.
  EXPECT_THAT(parse(R"({"defaultAction": "allow"})").status().message(),
              HasSubstr("must be \"deny\""));
  for (const char* bad : {R"({"egress": [{"action": "allow", "target": "10.0.0.0/8"}]})",
                          R"({"egress": [{"action": "allow", "target": "a..b"}]})",
                          R"({"egress": [{"action": "allow", "target": "Example.COM"}]})",
                          R"({"egress": [{"action": "maybe", "target": "a.b"}]})",
                          R"({"egress": [{"action": "allow"}]})", R"({"egress": "a.b"})",
                          R"({"colour": 1})", R"("a.b")"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(parse(bad).status())) << bad;
  }
}

TEST(CreateSandboxTest, ResourceLimitsAreKeptForTheAgent) {
  ControllerConfig config;
  config.images = {{"*", "default"}};
  auto s = ParseCreateSandbox(R"({"image": {"uri": "x"}, "entrypoint": ["sh"],
                                  "resourceLimits": {"cpu": "500m", "memory": "256Mi"},
                                  "resourceRequests": {"cpu": "100m"}})",
                              config, absl::Now());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->limit_cpus, 0.5);
  EXPECT_EQ(s->limit_memory, 256ULL << 20);
  EXPECT_EQ(s->resources.cpu, 0.1);  // The request is what the scheduler reserves.
}

TEST(DrainTest, GracePeriod) {
  EXPECT_EQ(*ParseDrain(""), absl::ZeroDuration());
  EXPECT_EQ(*ParseDrain(R"({"gracePeriodSeconds": 30})"), absl::Seconds(30));
  EXPECT_FALSE(ParseDrain(R"({"gracePeriodSeconds": -1})").ok());
  EXPECT_FALSE(ParseDrain(R"({"gracePeriodSeconds": "30"})").ok());
  EXPECT_FALSE(ParseDrain(R"({"grace": 30})").ok());
}

TEST(RunRequestTest, CommandCodeAndTheSandboxSpec) {
  ControllerConfig config;
  config.images = {{"python:*", "python"}, {"*", "default"}};
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  auto run = ParseRunRequest(R"({"command": ["echo", "it's", "$HOME"], "timeout": 5,
                                 "env": {"A": "1"}})",
                             config, now);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->command.command, R"(exec 'echo' 'it'\''s' '$HOME')");
  EXPECT_EQ(run->command.timeout, absl::Seconds(5));
  EXPECT_EQ(run->spec.profile, "default");
  EXPECT_EQ(run->spec.env.at("A"), "1");
  EXPECT_EQ(run->spec.expires_at, now + absl::Seconds(60));
  run =
      ParseRunRequest(R"js({"code": "print(1)", "image": {"uri": "python:3.11"}})js", config, now);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->command.command, "exec python3 -c 'print(1)'");
  EXPECT_EQ(run->spec.profile, "python");
  EXPECT_EQ(ParseRunRequest(R"({"command": "ls | wc -l"})", config, now)->command.command,
            "ls | wc -l");
  for (const char* bad : {R"({})", R"({"command": "a", "code": "b"})", R"({"command": []})",
                          R"({"command": [1]})", R"({"code": "x", "language": "cobol"})",
                          R"({"command": "a", "timeout": 0})", R"({"command": "a", "colour": 1})",
                          R"({"command": "a", "networkPolicy": {"defaultAction": "allow"}})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseRunRequest(bad, config, now).status())) << bad;
  }
}

TEST(RunResultTest, TheMoatRunJsonShape) {
  AgentCommandResult r;
  r.stdout_text = "hi\n";
  r.status = "exited";
  r.exit_code = 3;
  json j = RunResultJson(r);
  EXPECT_EQ(j["status"], "exited");
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_EQ(j["signal"], nullptr);
  EXPECT_EQ(j["stdout"], "hi\n");
  for (const char* key : {"stderr", "stdout_truncated", "wall_seconds", "cpu_seconds",
                          "peak_memory_bytes", "violations"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  r.status = "signaled";
  r.exit_code = 137;
  j = RunResultJson(r);
  EXPECT_EQ(j["status"], "signaled");
  EXPECT_EQ(j["signal"], 9);
  EXPECT_EQ(j["exit_code"], nullptr);
  r.status = "timed_out";
  EXPECT_EQ(RunResultJson(r)["status"], "wall_timeout");
  r.status = "oom_killed";
  EXPECT_EQ(RunResultJson(r)["violations"][0]["kind"], "memory");
}

TEST(RunRequestTest, LanguageProfilesAndDeclaredDurationsSetTheLimits) {
  ControllerConfig config;
  config.images = {{"*", "default"}};
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  auto run = ParseRunRequest(R"js({"code": "console.log(1)", "language": "node"})js", config, now);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->profile, "javascript");
  EXPECT_FALSE(run->declared.has_value());
  ASSERT_TRUE(ApplyRunLimits(*run, {"javascript", absl::Seconds(60), absl::Seconds(15)}, now).ok());
  EXPECT_EQ(run->command.timeout, absl::Seconds(60));
  EXPECT_EQ(run->command.cpu_timeout, absl::Seconds(15));
  EXPECT_EQ(run->spec.expires_at, now + absl::Seconds(90));
  // A timeout lowers the wall limit; the CPU limit keeps the ratio.
  run = ParseRunRequest(R"({"command": "make", "timeout": 20, "expectedDuration": 12.5})", config,
                        now);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->profile, "shell");
  EXPECT_EQ(run->declared, absl::Milliseconds(12500));
  ASSERT_TRUE(ApplyRunLimits(*run, {"shell", absl::Seconds(60), absl::Seconds(15)}, now).ok());
  EXPECT_EQ(run->command.timeout, absl::Seconds(20));
  EXPECT_EQ(run->command.cpu_timeout, absl::Seconds(5));
  EXPECT_EQ(run->spec.expires_at, now + absl::Seconds(60));
  // Above the profile's wall limit: a 400 that says to declare the duration.
  run = ParseRunRequest(R"({"command": "make", "timeout": 90})", config, now);
  ASSERT_TRUE(run.ok());
  absl::Status too_long =
      ApplyRunLimits(*run, {"shell", absl::Seconds(30), absl::Seconds(7.5), true}, now);
  EXPECT_TRUE(absl::IsInvalidArgument(too_long));
  EXPECT_THAT(std::string(too_long.message()), HasSubstr("expectedDuration"));
  EXPECT_THAT(std::string(too_long.message()), HasSubstr("lowered"));
  for (const char* bad : {R"({"command": "a", "expectedDuration": 0})",
                          R"({"command": "a", "expectedDuration": "10"})",
                          R"({"command": "a", "expectedDuration": 301})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseRunRequest(bad, config, now).status())) << bad;
  }
}

TEST(RunResultTest, CpuMemoryAndViolationsAsMoatRunReportsThem) {
  AgentCommandResult r;
  r.status = "cpu_timeout";
  r.exit_code = 137;
  r.cpu_seconds = 1.5;
  r.peak_memory_bytes = 7 << 20;
  r.oom_kills = 0;
  r.pids_limit_hits = 2;
  json j = RunResultJson(r);
  EXPECT_EQ(j["status"], "cpu_timeout");
  EXPECT_EQ(j["signal"], 9);
  EXPECT_EQ(j["exit_code"], nullptr);
  EXPECT_EQ(j["cpu_seconds"], 1.5);
  EXPECT_EQ(j["peak_memory_bytes"], 7 << 20);
  EXPECT_FALSE(j.contains("notes"));
  ASSERT_EQ(j["violations"].size(), 1u);
  EXPECT_EQ(j["violations"][0]["detail"], "2 fork(s) refused at the process limit");
  r.status = "oom_killed";
  r.oom_kills = 3;
  r.pids_limit_hits = 0;
  j = RunResultJson(r);
  EXPECT_EQ(j["violations"][0]["detail"],
            "3 process(es) killed by the OOM killer at the memory limit");
  // An agent that reports no figures: 0, and a note that says why.
  j = RunResultJson(AgentCommandResult{.status = "exited", .exit_code = 0});
  EXPECT_EQ(j["cpu_seconds"], 0.0);
  EXPECT_TRUE(j.contains("notes"));
}

// The agent's violations in moat run's order (sandbox/runner.cc): the supervisor's seccomp
// ones as they came, its memory and pids counts, then the egress session's network denials.
TEST(RunResultTest, ViolationsInMoatRunsOrder) {
  AgentCommandResult r;
  r.status = "oom_killed";
  r.exit_code = 137;
  r.oom_kills = 1;
  r.pids_limit_hits = 2;
  r.violations = {{"network", "GET a:80 (http) denied: x"},
                  {"seccomp", "blocked system call mount"},
                  {"network", "GET b:80 (http) denied: y"},
                  {"mount", "a new mount at /x"}};
  r.violations_dropped = 3;
  json j = RunResultJson(r);
  std::vector<std::string> kinds;
  for (const json& v : j["violations"]) kinds.push_back(v["kind"]);
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"seccomp", "mount", "memory", "pids", "network", "network"}));
  EXPECT_EQ(j["violations"][4]["detail"], "GET a:80 (http) denied: x");
  EXPECT_EQ(j["violations_dropped"], 3);
  r.violations_dropped.reset();
  EXPECT_FALSE(RunResultJson(r).contains("violations_dropped"));
}

}  // namespace moat::controller
