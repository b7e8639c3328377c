#include "node-agent/config/config.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/policy/policy.h"
#include "util/testing/temp_dir.h"

namespace moat::agent {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kMinimal[] = R"(
token_file: /etc/moat/agent.token
profiles:
  - name: default
)";

TEST(ConfigTest, MinimalFileGetsTheDefaults) {
  auto config = ParseConfig(kMinimal, "agent.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen_address, "127.0.0.1");
  EXPECT_EQ(config->port, 7070);
  EXPECT_FALSE(config->tls.has_value());
  EXPECT_EQ(config->token_file, "/etc/moat/agent.token");
  EXPECT_EQ(config->heartbeat_interval, absl::Seconds(5));
  EXPECT_EQ(config->heartbeat_misses, 3);
  EXPECT_EQ(config->restart_grace, absl::Seconds(60));
  ASSERT_EQ(config->profiles.size(), 1u);
  EXPECT_EQ(config->profiles[0].root_dir, "/");
  EXPECT_EQ(config->profiles[0].limits, Limits{});
}

TEST(ConfigTest, FullFile) {
  auto config = ParseConfig(R"(
listen: {address: 0.0.0.0, port: 9443}
tls: {cert: /etc/moat/agent.crt, key: /etc/moat/agent.key}
token_file: /etc/moat/agent.token
state_dir: /srv/moat
heartbeat: {interval: 250ms, misses: 4}
recycle: {per_second: 2.5}
restart_grace: 0s
api: {max_request_bytes: 64KiB, default_ttl: 10m, max_ttl: 2h}
profiles:
  - name: python
    root: /srv/roots/python
    policy: /etc/moat/python.yaml
    limits: {cpus: 1.5, memory: 512MiB, pids: 256, workspace: 1G}
    pool: {floor: 5, ceiling: 50}
  - name: node
)",
                            "agent.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen_address, "0.0.0.0");
  EXPECT_EQ(config->port, 9443);
  ASSERT_TRUE(config->tls.has_value());
  EXPECT_EQ(config->tls->key_file, "/etc/moat/agent.key");
  EXPECT_EQ(config->state_dir, "/srv/moat");
  EXPECT_EQ(config->heartbeat_interval, absl::Milliseconds(250));
  EXPECT_EQ(config->heartbeat_misses, 4);
  EXPECT_EQ(config->restart_grace, absl::ZeroDuration());
  EXPECT_DOUBLE_EQ(config->recycle_per_second, 2.5);
  EXPECT_EQ(config->max_request_bytes, 64u * 1024);
  EXPECT_EQ(config->default_ttl, absl::Minutes(10));
  EXPECT_EQ(config->max_ttl, absl::Hours(2));
  const ProfileConfig* python = config->FindProfile("python");
  ASSERT_NE(python, nullptr);
  EXPECT_EQ(python->root_dir, "/srv/roots/python");
  EXPECT_EQ(python->policy_file, "/etc/moat/python.yaml");
  EXPECT_EQ(python->limits,
            (Limits{1.5, 512u << 20, 256, 1u << 30}));  // 1G: binary, as in policies
  EXPECT_EQ(python->pool_floor, 5);
  EXPECT_EQ(python->pool_ceiling, 50);
  EXPECT_NE(config->FindProfile("node"), nullptr);
  EXPECT_EQ(config->FindProfile("ruby"), nullptr);
}

TEST(ConfigTest, AgentOwnFilesAreEveryFileOfItsOwn) {
  auto config = ParseConfig(R"(
tls: {cert: /etc/moat/agent.crt, key: /etc/moat/agent.key}
token_file: /etc/moat/agent.token
profiles:
  - name: python
    policy: /etc/moat/python.yaml
  - name: node
    policy: /etc/moat/python.yaml
controller: {url: https://c:8080, join_token_file: /etc/moat/join.token,
             tls: {ca: /etc/moat/ca.crt}}
)",
                            "agent.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(AgentOwnFiles(*config, "/etc/moat/agent.yaml"),
              ElementsAre("/etc/moat/agent.crt", "/etc/moat/agent.key", "/etc/moat/agent.token",
                          "/etc/moat/agent.yaml", "/etc/moat/ca.crt", "/etc/moat/join.token",
                          "/etc/moat/python.yaml"));
  // A relative config path is made absolute: the sandbox resolves it from its own "/".
  const std::vector<std::string> relative = AgentOwnFiles(*config, "conf/./agent.yaml");
  const std::string expected = (std::filesystem::current_path() / "conf/agent.yaml").string();
  EXPECT_THAT(relative, Contains(expected));
  // No TLS, no controller, no policies: the config and the token only.
  auto minimal = ParseConfig("token_file: /t\nprofiles: [{name: a}]\n", "agent.yaml");
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  EXPECT_THAT(AgentOwnFiles(*minimal, "/c.yaml"), ElementsAre("/c.yaml", "/t"));
}

TEST(ConfigTest, ControllerJoin) {
  auto config = ParseConfig(R"(
token_file: /etc/moat/agent.token
profiles: [{name: default}]
controller:
  url: https://controller.example:8443
  join_token_file: /etc/moat/join.token
  node_name: n1
  advertise_url: https://10.0.0.5:7070
  labels: {zone: a}
  taints: {dedicated: ci}
  tls: {ca: /etc/moat/controller-ca.crt}
)",
                            "agent.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->controller.has_value());
  const ControllerJoinConfig& c = *config->controller;
  EXPECT_EQ(c.url, "https://controller.example:8443");
  EXPECT_EQ(c.join_token_file, "/etc/moat/join.token");
  EXPECT_EQ(c.node_name, "n1");
  EXPECT_EQ(c.advertise_url, "https://10.0.0.5:7070");
  EXPECT_EQ(c.labels, (std::map<std::string, std::string>{{"zone", "a"}}));
  EXPECT_EQ(c.taints, (std::map<std::string, std::string>{{"dedicated", "ci"}}));
  EXPECT_EQ(c.ca_file, "/etc/moat/controller-ca.crt");
  // Without tls: the system's CAs.
  auto plain = ParseConfig(
      "token_file: /t\nprofiles: [{name: d}]\ncontroller: {url: \"http://c:8080\", "
      "join_token_file: /j}\n",
      "agent.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->controller->ca_file, "");
}

struct BadCase {
  std::string name;
  std::string yaml;
  std::string expected;  // A part of the error message: the key and the fix.
};

class ConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigErrorTest, NamesFileKeyAndFix) {
  auto config = ParseConfig(GetParam().yaml, "agent.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("agent.yaml"));
  EXPECT_THAT(config.status().message(), HasSubstr(GetParam().expected));
}

const std::string kProfile = "profiles: [{name: default}]\n";
const std::string kToken = "token_file: /etc/moat/agent.token\n";

INSTANTIATE_TEST_SUITE_P(
    Table, ConfigErrorTest,
    ::testing::Values(
        BadCase{"UnknownTopKey", kToken + kProfile + "listne: {}\n", "\"listne\" is not a known"},
        BadCase{"UnknownNestedKey", kToken + kProfile + "heartbeat: {intervall: 5s}\n",
                "\"heartbeat.intervall\" is not a known key"},
        BadCase{"NoToken", kProfile, "\"token_file\" must be a non-empty string"},
        BadCase{"RelativeToken", "token_file: agent.token\n" + kProfile, "absolute path"},
        BadCase{"NoProfiles", kToken, "\"profiles\" must be a list"},
        BadCase{"EmptyProfiles", kToken + "profiles: []\n", "at least one profile"},
        BadCase{"BadPort", kToken + kProfile + "listen: {port: 70000}\n",
                "\"listen.port\" must be a whole number from 0 to 65535"},
        BadCase{"PortNotNumber", kToken + kProfile + "listen: {port: http}\n", "listen.port"},
        BadCase{"BadInterval", kToken + kProfile + "heartbeat: {interval: 5x}\n",
                "\"heartbeat.interval\" must be a duration"},
        BadCase{"DuplicateKey", kToken + kProfile + "heartbeat: {interval: 5s, interval: 6s}\n",
                "\"heartbeat.interval\" appears twice"},
        BadCase{"DuplicateTopKey", kToken + kToken + kProfile, "\"token_file\" appears twice"},
        BadCase{"ZeroMisses", kToken + kProfile + "heartbeat: {misses: 0}\n", "heartbeat.misses"},
        BadCase{"TlsWithoutKey", kToken + kProfile + "tls: {cert: /a.crt}\n", "\"tls.key\""},
        BadCase{"BadMemory", kToken + "profiles: [{name: p, limits: {memory: lots}}]\n",
                "\"profiles[0].limits.memory\" must be a size"},
        BadCase{"NegativeCpus", kToken + "profiles: [{name: p, limits: {cpus: -1}}]\n",
                "profiles[0].limits.cpus"},
        BadCase{"FloorAboveCeiling",
                kToken + "profiles: [{name: p, pool: {floor: 9, ceiling: 2}}]\n",
                "floor above ceiling"},
        BadCase{"DuplicateProfile", kToken + "profiles: [{name: p}, {name: p}]\n",
                "repeats the profile name \"p\""},
        BadCase{"BadProfileName", kToken + "profiles: [{name: ../x}]\n", "lower-case letters"},
        BadCase{"RelativeRoot", kToken + "profiles: [{name: p, root: srv}]\n",
                "\"profiles[0].root\" must be an absolute path"},
        BadCase{"DefaultTtlAboveMax", kToken + kProfile + "api: {max_ttl: 1h, default_ttl: 2h}\n",
                "api.default_ttl"},
        BadCase{"ControllerCaWithPlainHttp",
                kToken + kProfile +
                    "controller: {url: \"http://c:8080\", join_token_file: /j, "
                    "tls: {ca: /ca.pem}}\n",
                "\"controller.tls.ca\" is set but controller.url is not https://"},
        BadCase{
            "ControllerCaRelative",
            kToken + kProfile +
                "controller: {url: \"https://c:8080\", join_token_file: /j, tls: {ca: ca.pem}}\n",
            "\"controller.tls.ca\" must be an absolute path"},
        BadCase{"ControllerTlsUnknownKey",
                kToken + kProfile +
                    "controller: {url: \"https://c:8080\", join_token_file: /j, tls: {cert: /c}}\n",
                "\"controller.tls.cert\" is not a known key"},
        BadCase{"NotAMap", "- a\n- b\n", "must be a mapping"},
        BadCase{"SyntaxError", "token_file: [unclosed\n", "not valid YAML"}),
    [](const auto& info) { return info.param.name; });

TEST(ConfigTest, ErrorsCarryTheLine) {
  auto config = ParseConfig(kToken + kProfile + "heartbeat:\n  misses: many\n", "agent.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("agent.yaml:4:"));
}

TEST(ConfigTest, LoadConfigReportsAMissingFile) {
  auto config = LoadConfig("/nonexistent/agent.yaml");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(config.status().message(), HasSubstr("\"/nonexistent/agent.yaml\""));
}

// Sizes and durations mean what they mean in policies and flags (util/units.h): "2K" is 2048
// bytes, a bare number of seconds is a duration, and "2KB" is refused with what to write.
TEST(ConfigTest, SizesAndDurationsAreTheRuntimes) {
  auto config = ParseConfig(kToken +
                                "profiles: [{name: p, limits: {memory: 2K, workspace: 1.5G}}]\n"
                                "heartbeat: {interval: 7}\n",
                            "agent.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->FindProfile("p")->limits.memory_bytes, 2048u);
  EXPECT_EQ(config->FindProfile("p")->limits.workspace_bytes, 3ull << 29);
  EXPECT_EQ(config->heartbeat_interval, absl::Seconds(7));
  auto decimal = ParseConfig(kToken + "profiles: [{name: p, limits: {memory: 2KB}}]\n", "a.yaml");
  ASSERT_FALSE(decimal.ok());
  EXPECT_THAT(decimal.status().message(), HasSubstr("sizes in moat are binary; write 2K or 2KiB"));
}

// The shipped example (node-agent/examples/agent.yaml) parses, and each of its rootfs profiles
// names a policy that policies/ ships and the runtime's policy parser accepts.
TEST(ConfigTest, ShippedExampleParses) {
  // The build names the source tree (__FILE__ is relative under ccache's base_dir).
  const std::string repo_dir = MOAT_SOURCE_DIR;
  const std::string agent_dir = repo_dir + "/node-agent";
  auto config = LoadConfig(agent_dir + "/examples/agent.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  for (const char* name : {"python", "node"}) {
    SCOPED_TRACE(name);
    const ProfileConfig* profile = config->FindProfile(name);
    ASSERT_NE(profile, nullptr);
    EXPECT_EQ(profile->root_dir, std::string("/srv/moat/roots/") + name);
    EXPECT_LE(profile->pool_floor, profile->pool_ceiling);
    EXPECT_GT(profile->limits.memory_bytes, 0u);
    const std::string policy_name = profile->policy_file.substr(profile->policy_file.rfind('/'));
    EXPECT_EQ(policy_name, std::string("/") + name + ".yaml");
    auto policy = sandbox::ParsePolicyFile(repo_dir + "/policies" + policy_name,
                                           sandbox::PathContext{.home = "", .cwd = "/"});
    ASSERT_TRUE(policy.ok()) << policy.status();
    EXPECT_TRUE(policy->memory_bytes.has_value());
    EXPECT_FALSE(policy->allowed_domains.has_value()) << "the profile roots need no network";
  }
  const ProfileConfig* host = config->FindProfile("host");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->root_dir, "/");
}

}  // namespace
}  // namespace moat::agent

namespace moat::agent {
namespace {

// Profiles' policies are read and parsed once, at start: a broken one stops the agent with the
// profile and file named, and a loaded one is not read again (an edit waits for the next start).
TEST(LoadProfilePoliciesTest, ParsesEachProfilesPolicyOnce) {
  ScopedTempDir dir;
  const std::string good = dir.File("good.yaml");
  std::ofstream(good) << "network:\n  allowedDomains: [pypi.org]\n";
  AgentConfig config;
  ProfileConfig python;
  python.name = "python";
  python.policy_file = good;
  config.profiles = {python};
  ASSERT_TRUE(LoadProfilePolicies(&config).ok());
  ASSERT_TRUE(config.profiles[0].policy_text.has_value());
  std::ofstream(good, std::ios::trunc) << "limits: {memory: lots}\n";
  absl::StatusOr<std::string> text = ReadProfilePolicy(config.profiles[0]);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("pypi.org"));

  for (const char* broken : {"limits: {memory: lots}\n", "filesystem: {allowWrite: [/etc]}\n"}) {
    SCOPED_TRACE(broken);
    const std::string path = dir.File("broken.yaml");
    std::ofstream(path, std::ios::trunc) << broken;
    AgentConfig bad;
    ProfileConfig node;
    node.name = "node";
    node.policy_file = path;
    bad.profiles = {node};
    absl::Status loaded = LoadProfilePolicies(&bad);
    ASSERT_FALSE(loaded.ok());
    EXPECT_THAT(loaded.message(), HasSubstr("profile \"node\""));
    EXPECT_THAT(loaded.message(), HasSubstr(path));
  }
}

}  // namespace
}  // namespace moat::agent
