#include "sandbox/policy/policy_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/policy/policy.h"

namespace moat::sandbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

const PathContext kPaths{.home = "/home/u", .cwd = "/repo"};

absl::StatusOr<PolicyLayer> Yaml(absl::string_view text) {
  return ParsePolicyText(text, "/repo/.moat/policy.yaml", /*is_json=*/false, kPaths);
}

absl::StatusOr<PolicyLayer> Json(absl::string_view text) {
  return ParsePolicyText(text, "/repo/.pi/sandbox.json", /*is_json=*/true, kPaths);
}

// Both formats must accept and refuse the same documents; `json` is the same document as JSON.
void ExpectBothFail(absl::string_view yaml, absl::string_view json, absl::string_view message) {
  absl::StatusOr<PolicyLayer> y = Yaml(yaml);
  ASSERT_FALSE(y.ok()) << yaml;
  EXPECT_THAT(Message(y.status()), HasSubstr(std::string(message))) << yaml;
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<PolicyLayer> j = Json(json);
  ASSERT_FALSE(j.ok()) << json;
  EXPECT_THAT(Message(j.status()), HasSubstr(std::string(message))) << json;
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
}

// A document both formats must refuse: `json` is `yaml` as JSON, `message` part of the error.
struct BadDocument {
  absl::string_view yaml;
  absl::string_view json;
  absl::string_view message;
};

void ExpectEachFails(std::initializer_list<BadDocument> documents) {
  for (const BadDocument& d : documents) {
    SCOPED_TRACE(d.yaml);
    ExpectBothFail(d.yaml, d.json, d.message);
  }
}

constexpr absl::string_view kFullYaml = R"(
network:
  allowedDomains: ["Example.com", "*.example.com", "api.x.com:443"]
  deniedDomains: ["bad.example.com"]
  allowedCidrs: ["10.1.0.0/16", "::1"]
  dnsServers: ["127.0.0.1:5353", "[::1]"]
  maxRequestBodyBytes: 1M
  requestsPerMinute: 30
  transparent: true
filesystem:
  denyRead: ["~/.netrc", "secrets/"]
  allowWrite: ["."]
  denyWrite: ["./.git"]
  hideHome: false
limits:
  memory: 1G
  pids: 100
  cpus: 0.5
  cpuTimeout: 1.5s
  wallTimeout: 2m
  tmpfsSize: 32MiB
env:
  ZED: last
  ALPHA: "1"
  ZIP: 01234
)";

constexpr absl::string_view kFullJson = R"({
  "network": {
    "allowedDomains": ["Example.com", "*.example.com", "api.x.com:443"],
    "deniedDomains": ["bad.example.com"],
    "allowedCidrs": ["10.1.0.0/16", "::1"],
    "dnsServers": ["127.0.0.1:5353", "[::1]"],
    "maxRequestBodyBytes": "1M", "requestsPerMinute": 30, "transparent": true
  },
  "filesystem": {
    "denyRead": ["~/.netrc", "secrets/"],
    "allowWrite": ["."],
    "denyWrite": ["./.git"],
    "hideHome": false
  },
  "limits": {
    "memory": "1G", "pids": 100, "cpus": 0.5, "cpuTimeout": "1.5s", "wallTimeout": "2m",
    "tmpfsSize": "32MiB"
  },
  "env": {"ZED": "last", "ALPHA": "1", "ZIP": "01234"}
})";

void ExpectFullLayer(const PolicyLayer& layer) {
  EXPECT_THAT(*layer.allowed_domains, ElementsAre("example.com", "*.example.com", "api.x.com:443"));
  EXPECT_THAT(*layer.denied_domains, ElementsAre("bad.example.com"));
  EXPECT_THAT(*layer.allowed_cidrs, ElementsAre("10.1.0.0/16", "::1/128"));
  EXPECT_THAT(*layer.dns_servers, ElementsAre("127.0.0.1:5353", "[::1]:53"));
  EXPECT_EQ(layer.max_request_body_bytes, 1ull << 20);
  EXPECT_EQ(layer.requests_per_minute, 30u);
  EXPECT_EQ(layer.transparent, true);
  EXPECT_THAT(*layer.deny_read, ElementsAre("/home/u/.netrc", "/repo/secrets"));
  EXPECT_THAT(*layer.allow_write, ElementsAre("/repo"));
  EXPECT_THAT(*layer.deny_write, ElementsAre("/repo/.git"));
  EXPECT_EQ(layer.hide_home, false);
  EXPECT_EQ(layer.memory_bytes, 1ull << 30);
  EXPECT_EQ(layer.pids, 100u);
  EXPECT_EQ(layer.cpus, 0.5);
  EXPECT_EQ(layer.cpu_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(layer.wall_timeout, absl::Minutes(2));
  EXPECT_EQ(layer.tmpfs_bytes, 32ull << 20);
  // In the order written, not sorted; YAML keeps "01234" as written.
  EXPECT_THAT(layer.env,
              ElementsAre(Pair("ZED", "last"), Pair("ALPHA", "1"), Pair("ZIP", "01234")));
}

TEST(ParsePolicyTextTest, ReadsEveryMoatKeyFromYaml) {
  absl::StatusOr<PolicyLayer> layer = Yaml(kFullYaml);
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_EQ(layer->source, "/repo/.moat/policy.yaml");
  ExpectFullLayer(*layer);
}

TEST(ParsePolicyTextTest, ReadsEveryMoatKeyFromJson) {
  absl::StatusOr<PolicyLayer> layer = Json(kFullJson);
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_EQ(layer->source, "/repo/.pi/sandbox.json");
  ExpectFullLayer(*layer);
}

TEST(ParsePolicyTextTest, AbsentKeysStayUnset) {
  absl::StatusOr<PolicyLayer> layer = Yaml("limits:\n  pids: 10\n");
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_EQ(layer->pids, 10u);
  EXPECT_FALSE(layer->memory_bytes || layer->cpus || layer->cpu_timeout || layer->wall_timeout ||
               layer->tmpfs_bytes || layer->allowed_domains || layer->denied_domains ||
               layer->deny_read || layer->allow_write || layer->deny_write || layer->hide_home);
  EXPECT_TRUE(layer->env.empty());
}

TEST(ParsePolicyTextTest, EmptyDocumentsAndSectionsAreEmptyLayers) {
  for (absl::string_view text : {"", "# only a comment\n", "limits:\nnetwork:\n"}) {
    absl::StatusOr<PolicyLayer> layer = Yaml(text);
    ASSERT_TRUE(layer.ok()) << text << ": " << layer.status();
    EXPECT_FALSE(layer->memory_bytes || layer->allowed_domains || layer->hide_home) << text;
  }
  EXPECT_TRUE(Json("{}").ok());
  // An explicitly empty list is a value (it narrows to nothing), not an absent key.
  absl::StatusOr<PolicyLayer> layer = Json(R"({"network": {"allowedDomains": []}})");
  ASSERT_TRUE(layer.ok());
  ASSERT_TRUE(layer->allowed_domains.has_value());
  EXPECT_TRUE(layer->allowed_domains->empty());
}

// The limits both documents of NumbersWorkAsNumbersAndAsStrings set.
void ExpectTheNumbers(absl::string_view format, const PolicyLayer& layer) {
  SCOPED_TRACE(format);
  EXPECT_EQ(layer.memory_bytes, 536870912u);
  EXPECT_EQ(layer.cpus, 2.0);
  EXPECT_EQ(layer.cpu_timeout, absl::Seconds(30));
  EXPECT_EQ(layer.wall_timeout, absl::Milliseconds(500));
  EXPECT_EQ(layer.pids, 7u);
}

TEST(ParsePolicyTextTest, NumbersWorkAsNumbersAndAsStrings) {
  absl::StatusOr<PolicyLayer> yaml =
      Yaml("limits: {memory: 536870912, cpus: 2, cpuTimeout: 30, wallTimeout: 0.5, pids: 7}");
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  ExpectTheNumbers("YAML", *yaml);

  absl::StatusOr<PolicyLayer> json = Json(
      R"({"limits": {"memory": 536870912, "cpus": 2, "cpuTimeout": 30, "wallTimeout": 0.5,
                     "pids": "7", "tmpfsSize": 1048576}})");
  ASSERT_TRUE(json.ok()) << json.status();
  ExpectTheNumbers("JSON", *json);
  EXPECT_EQ(json->tmpfs_bytes, 1u << 20);
}

TEST(ParsePolicyTextTest, ErrorFormatNamesFileLineKeyAndRemedy) {
  EXPECT_EQ(Message(Json(R"({"limits": {"memory": "12Q"}})").status()),
            "policy file \"/repo/.pi/sandbox.json\": key \"limits.memory\": invalid size \"12Q\" "
            "(use e.g. 512M, 1G)");
  EXPECT_EQ(Message(Yaml("# policy\nlimits:\n  memory: 12Q\n").status()),
            "policy file \"/repo/.moat/policy.yaml\", line 3: key \"limits.memory\": invalid size "
            "\"12Q\" (use e.g. 512M, 1G)");
}

TEST(ParsePolicyTextTest, ListItemErrorsNameTheIndexAndLine) {
  absl::Status s = Yaml("network:\n  allowedDomains:\n    - ok.com\n    - bad_host.com\n").status();
  EXPECT_THAT(Message(s), StartsWith("policy file \"/repo/.moat/policy.yaml\", line 4: key "
                                     "\"network.allowedDomains[1]\": invalid domain"));
  EXPECT_THAT(Message(s), HasSubstr("\"_\""));
}

TEST(ParsePolicyTextTest, RejectsInvalidLimitValues) {
  ExpectEachFails({
      {"limits: {memory: 0}", R"({"limits": {"memory": 0}})", "above 0"},
      {"limits: {memory: -1}", R"({"limits": {"memory": -1}})", "invalid size"},
      {"limits: {memory: 1.5}", R"({"limits": {"memory": 1.5}})", "whole number"},
      {"limits: {memory: true}", R"({"limits": {"memory": true}})", "must be a number or a string"},
      {"limits: {memory: [1]}", R"({"limits": {"memory": [1]}})", "must be a number or a string"},
      {"limits: {tmpfsSize: 0}", R"({"limits": {"tmpfsSize": "0"}})", "above 0"},
      {"limits: {pids: 0}", R"({"limits": {"pids": 0}})", "from 1 to"},
      {"limits: {pids: 5000000}", R"({"limits": {"pids": 5000000}})", "from 1 to"},
      {"limits: {pids: 1.5}", R"({"limits": {"pids": 1.5}})", "invalid number"},
      {"limits: {pids: 1e3}", R"({"limits": {"pids": "1e3"}})", "invalid number"},
      {"limits: {pids: -3}", R"({"limits": {"pids": -3}})", "invalid number"},
      {"limits: {cpus: 0}", R"({"limits": {"cpus": 0}})", "above 0"},
      {"limits: {cpus: 1025}", R"({"limits": {"cpus": 1025}})", "at most 1024"},
      {"limits: {cpus: -1}", R"({"limits": {"cpus": -1}})", "invalid CPU count"},
      {"limits: {cpuTimeout: 0}", R"({"limits": {"cpuTimeout": 0}})", "at least 1ms"},
      {"limits: {wallTimeout: 0.5ms}", R"({"limits": {"wallTimeout": "0.5ms"}})", "at least 1ms"},
      {"limits: {wallTimeout: -1s}", R"({"limits": {"wallTimeout": "-1s"}})", "invalid duration"},
      {"limits: {wallTimeout: 1d}", R"({"limits": {"wallTimeout": "1d"}})", "invalid duration"},
      {"limits: {cpuTimeout: null}", R"({"limits": {"cpuTimeout": null}})",
       "must be a number or a string"},
  });
}

TEST(ParsePolicyTextTest, RejectsUnknownKeysAtEveryLevel) {
  ExpectEachFails({
      {"netwrok: {}", R"({"netwrok": {}})", "key \"netwrok\": unknown key"},
      {"network: {allowDomains: []}", R"({"network": {"allowDomains": []}})",
       "key \"network.allowDomains\": unknown key"},
      {"filesystem: {readOnly: true}", R"({"filesystem": {"readOnly": true}})",
       "key \"filesystem.readOnly\": unknown key"},
      {"limits: {memroy: 1G}", R"({"limits": {"memroy": "1G"}})",
       "key \"limits.memroy\": unknown key"},
      {"unsandboxedCommands: [docker]", R"({"unsandboxedCommands": ["docker"]})",
       "key \"unsandboxedCommands\": unknown key"},
  });
}

TEST(ParsePolicyTextTest, RejectsWrongShapes) {
  ExpectEachFails({
      {"[1, 2]", "[1, 2]", "the top level must be a mapping"},
      {"just text", R"("just text")", "the top level must be a mapping"},
      {"network: [a.com]", R"({"network": ["a.com"]})", "key \"network\": must be a mapping"},
      {"limits: 5", R"({"limits": 5})", "key \"limits\": must be a mapping"},
      {"env: [A]", R"({"env": ["A"]})", "key \"env\": must be a mapping"},
      {"network: {allowedDomains: a.com}", R"({"network": {"allowedDomains": "a.com"}})",
       "must be a list of strings"},
      {"network: {allowedDomains: }", R"({"network": {"allowedDomains": null}})",
       "write [] for an empty list"},
      {"network: {deniedDomains: [[a.com]]}", R"({"network": {"deniedDomains": [["a.com"]]}})",
       "key \"network.deniedDomains[0]\": must be a string"},
      {"filesystem: {denyRead: [{a: b}]}", R"({"filesystem": {"denyRead": [{"a": "b"}]}})",
       "key \"filesystem.denyRead[0]\": must be a string"},
      {"filesystem: {hideHome: yes}", R"({"filesystem": {"hideHome": "yes"}})",
       "must be true or false"},
      {"filesystem: {hideHome: True}", R"({"filesystem": {"hideHome": 1}})",
       "must be true or false"},
  });
}

TEST(ParsePolicyTextTest, ResolvesHomeAndRelativePaths) {
  absl::StatusOr<PolicyLayer> layer = Yaml(R"(
filesystem:
  denyRead: ["~", "~/.ssh/", "secrets/", "./a/../b", "../outside", "/etc//passwd", "/../x"]
)");
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_THAT(*layer->deny_read, ElementsAre("/home/u", "/home/u/.ssh", "/repo/secrets", "/repo/b",
                                             "/outside", "/etc/passwd", "/x"));
}

TEST(ParsePolicyTextTest, RejectsBadPaths) {
  ExpectEachFails({
      {"filesystem: {denyRead: [\"\"]}", R"({"filesystem": {"denyRead": [""]}})", "empty"},
      {"filesystem: {allowWrite: [\"*.py\"]}", R"({"filesystem": {"allowWrite": ["*.py"]}})",
       "glob patterns are only for filesystem.denyRead and filesystem.denyWrite"},
      {"filesystem: {denyWrite: [\"src/*/x.pem\"]}",
       R"({"filesystem": {"denyWrite": ["src/*/x.pem"]}})", "only the last component"},
      {"filesystem: {denyWrite: [\"certs/**\"]}", R"({"filesystem": {"denyWrite": ["certs/**"]}})",
       "file name pattern"},
      {"filesystem: {allowWrite: [\"~root/x\"]}", R"({"filesystem": {"allowWrite": ["~root/x"]}})",
       "\"~user\" is not supported"},
      {"filesystem: {denyRead: [\"a\\x01b\"]}", R"({"filesystem": {"denyRead": ["a\u0001b"]}})",
       "control byte"},
  });
  // JSON can carry a NUL inside a string; it must not truncate the path silently.
  absl::Status nul = Json(R"({"filesystem": {"denyRead": ["/etc/shadow\u0000.txt"]}})").status();
  EXPECT_THAT(Message(nul), HasSubstr("NUL"));
}

TEST(ParsePolicyTextTest, HomeIsRequiredForTilde) {
  PathContext no_home{.home = "", .cwd = "/repo"};
  absl::StatusOr<PolicyLayer> layer =
      ParsePolicyText("filesystem: {denyRead: [\"~/.ssh\"]}", "/p.yaml", false, no_home);
  ASSERT_FALSE(layer.ok());
  EXPECT_THAT(Message(layer.status()), HasSubstr("home directory"));
}

TEST(ParsePolicyTextTest, EnvValuesAndNames) {
  absl::StatusOr<PolicyLayer> json =
      Json(R"({"env": {"A": "x y", "N": 42, "NEG": -1, "B": true, "_U": ""}})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(json->env, ElementsAre(Pair("A", "x y"), Pair("N", "42"), Pair("NEG", "-1"),
                                     Pair("B", "true"), Pair("_U", "")));
  ExpectBothFail("env: {1A: x}", R"({"env": {"1A": "x"}})", "invalid environment variable name");
  ExpectBothFail("env: {A-B: x}", R"({"env": {"A-B": "x"}})", "invalid environment variable name");
  // YAML keeps the text as written; a JSON float would come back reformatted, so it is refused.
  absl::StatusOr<PolicyLayer> yaml = Yaml("env: {A: 1.10}");
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_THAT(yaml->env, ElementsAre(Pair("A", "1.10")));
  EXPECT_THAT(Message(Json(R"({"env": {"A": 1.10}})").status()), HasSubstr("quote the value"));
  ExpectBothFail("env: {A: }", R"({"env": {"A": null}})", "quote the value");
  ExpectBothFail("env: {A: [x]}", R"({"env": {"A": ["x"]}})", "quote the value");
  absl::Status nul = Json(R"({"env": {"A": "x\u0000y"}})").status();
  EXPECT_THAT(Message(nul), HasSubstr("NUL"));
}

// The example config from Pi's sandbox extension, as a project would commit it.
constexpr absl::string_view kPiSandboxJson = R"({
  "enabled": true,
  "network": {
    "allowedDomains": ["github.com", "*.github.com"],
    "deniedDomains": []
  },
  "filesystem": {
    "denyRead": ["~/.ssh", "~/.aws"],
    "allowWrite": [".", "/tmp"],
    "denyWrite": [".env"]
  }
})";

TEST(ParsePolicyTextTest, AcceptsPiSandboxJson) {
  absl::StatusOr<PolicyLayer> layer = Json(kPiSandboxJson);
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_THAT(*layer->allowed_domains, ElementsAre("github.com", "*.github.com"));
  EXPECT_THAT(*layer->denied_domains, ElementsAre());
  EXPECT_THAT(*layer->deny_read, ElementsAre("/home/u/.ssh", "/home/u/.aws"));
  EXPECT_THAT(*layer->allow_write, ElementsAre("/repo", "/tmp"));
  EXPECT_THAT(*layer->deny_write, ElementsAre("/repo/.env"));
}

TEST(ParsePolicyTextTest, AcceptsHarmlessSandboxRuntimeKeys) {
  absl::StatusOr<PolicyLayer> layer = Json(R"({
    "network": {
      "allowedDomains": ["a.example.com"], "deniedDomains": ["*", "*:22"],
      "deniedDomainReasons": {"*:22": "no ssh"}, "strictAllowlist": false,
      "allowAllDomains": false, "allowUnixSockets": [], "allowAllUnixSockets": false,
      "allowLocalBinding": false, "allowMachLookup": []
    },
    "filesystem": {
      "denyRead": [], "allowWrite": [], "denyWrite": [], "disabled": false, "allowRead": [],
      "allowGitConfig": false
    },
    "ignoreViolations": {"*": ["/tmp"]},
    "enableWeakerNestedSandbox": false, "enableWeakerNetworkIsolation": false,
    "allowAppleEvents": false, "allowPty": false,
    "ripgrep": {"command": "rg"}, "mandatoryDenySearchDepth": 3,
    "seccomp": {"applyPath": "/usr/lib/apply-seccomp"},
    "bwrapPath": "/usr/bin/bwrap", "socatPath": "/usr/bin/socat",
    "windows": {"sandboxUser": "srt"}, "git": {"safeDirectories": ["/repo"]}
  })");
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_THAT(*layer->denied_domains, ElementsAre("*", "*:22"));
}

TEST(ParsePolicyTextTest, RefusesSandboxRuntimeKeysThatWouldWiden) {
  struct Case {
    absl::string_view json;
    absl::string_view key;
  } cases[] = {
      {R"({"enabled": false})", "enabled"},
      {R"({"enableWeakerNestedSandbox": true})", "enableWeakerNestedSandbox"},
      {R"({"enableWeakerNetworkIsolation": true})", "enableWeakerNetworkIsolation"},
      {R"({"allowAppleEvents": true})", "allowAppleEvents"},
      {R"({"allowPty": true})", "allowPty"},
      {R"({"credentials": {"files": [{"path": "~/.netrc", "mode": "deny"}]}})", "credentials"},
      {R"({"network": {"allowAllDomains": true}})", "network.allowAllDomains"},
      {R"({"network": {"allowUnixSockets": ["/var/run/docker.sock"]}})",
       "network.allowUnixSockets"},
      {R"({"network": {"allowAllUnixSockets": true}})", "network.allowAllUnixSockets"},
      {R"({"network": {"allowLocalBinding": true}})", "network.allowLocalBinding"},
      {R"({"network": {"allowMachLookup": ["com.apple.*"]}})", "network.allowMachLookup"},
      {R"({"network": {"httpProxyPort": 8080}})", "network.httpProxyPort"},
      {R"({"network": {"socksProxyPort": 1080}})", "network.socksProxyPort"},
      {R"({"network": {"mitmProxy": {"socketPath": "/s", "domains": ["a.com"]}}})",
       "network.mitmProxy"},
      {R"({"network": {"tlsTerminate": {}}})", "network.tlsTerminate"},
      {R"({"network": {"parentProxy": {"http": "http://p:3128"}}})", "network.parentProxy"},
      {R"({"network": {"filterRequest": "x"}})", "network.filterRequest"},
      {R"({"filesystem": {"disabled": true}})", "filesystem.disabled"},
      {R"({"filesystem": {"allowRead": ["~/.ssh/known_hosts"]}})", "filesystem.allowRead"},
      {R"({"filesystem": {"allowGitConfig": true}})", "filesystem.allowGitConfig"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<PolicyLayer> layer = Json(c.json);
    ASSERT_FALSE(layer.ok()) << c.json;
    EXPECT_THAT(Message(layer.status()), HasSubstr(absl::StrCat("key \"", c.key, "\""))) << c.json;
    EXPECT_THAT(Message(layer.status()), ::testing::AnyOf(HasSubstr("moat does not support"),
                                                          HasSubstr("disabling the sandbox")))
        << c.json;
  }
}

TEST(ParsePolicyTextTest, CompatKeysMustHaveTheirShape) {
  EXPECT_THAT(Message(Json(R"({"network": {"allowLocalBinding": "false"}})").status()),
              HasSubstr("must be true or false"));
  EXPECT_THAT(Message(Json(R"({"network": {"allowUnixSockets": "/s"}})").status()),
              HasSubstr("must be a list"));
  EXPECT_THAT(Message(Json(R"({"ignoreViolations": []})").status()),
              HasSubstr("must be a mapping"));
  EXPECT_THAT(Message(Json(R"({"enabled": null})").status()), HasSubstr("has no value"));
}

TEST(ParsePolicyTextTest, DomainListsUseAllowAndDenyRules) {
  ExpectEachFails({
      {"network: {allowedDomains: [\"*\"]}", R"({"network": {"allowedDomains": ["*"]}})",
       "not allowed in an allow list"},
      {"network: {allowedDomains: [\"*.com\"]}", R"({"network": {"allowedDomains": ["*.com"]}})",
       "too broad"},
      {"network: {allowedDomains: [\"https://a.com\"]}",
       R"({"network": {"allowedDomains": ["https://a.com"]}})", "URL"},
      {"network: {deniedDomains: [\"a..com\"]}", R"({"network": {"deniedDomains": ["a..com"]}})",
       "empty label"},
  });
  EXPECT_TRUE(Yaml("network: {deniedDomains: [\"*\", \"*.com\"]}").ok());
}

TEST(ParsePolicyTextTest, RejectsInvalidEgressValues) {
  ExpectEachFails({
      {"network: {allowedCidrs: [10.0.0.1/8]}", R"({"network": {"allowedCidrs": ["10.0.0.1/8"]}})",
       "network.allowedCidrs[0]"},
      {"network: {allowedCidrs: [not-an-address]}",
       R"({"network": {"allowedCidrs": ["not-an-address"]}})", "network.allowedCidrs"},
      {"network: {dnsServers: [\"1.2.3.4:0\"]}", R"({"network": {"dnsServers": ["1.2.3.4:0"]}})",
       "network.dnsServers[0]"},
      {"network: {dnsServers: [dns.google]}", R"({"network": {"dnsServers": ["dns.google"]}})",
       "network.dnsServers[0]"},
      {"network: {maxRequestBodyBytes: 0}", R"({"network": {"maxRequestBodyBytes": 0}})",
       "network.maxRequestBodyBytes"},
      {"network: {requestsPerMinute: 1.5}", R"({"network": {"requestsPerMinute": 1.5}})",
       "network.requestsPerMinute"},
      {"network: {requestsPerMinute: 0}", R"({"network": {"requestsPerMinute": 0}})",
       "network.requestsPerMinute"},
      {"network: {transparent: yes}", R"({"network": {"transparent": "yes"}})",
       "network.transparent"},
  });
}

TEST(ParseJsonPolicyTreeTest, ReportsSyntaxErrorsWithLine) {
  absl::Status s = Json("{\n  \"limits\": {\n    \"memory\": \"1G\",\n  }\n}").status();
  EXPECT_THAT(Message(s), StartsWith("policy file \"/repo/.pi/sandbox.json\": invalid JSON: "));
  EXPECT_THAT(Message(s), HasSubstr("line 4"));
  EXPECT_THAT(Message(Json("").status()), HasSubstr("invalid JSON"));
  EXPECT_THAT(Message(Json("{} {}").status()), HasSubstr("invalid JSON"));
  EXPECT_THAT(Message(Json("{\"a\": 1} // comment").status()), HasSubstr("invalid JSON"));
  EXPECT_THAT(Message(Json("{\"a\": \"\xff\"}").status()), HasSubstr("invalid JSON"));
}

TEST(ParseJsonPolicyTreeTest, RefusesDuplicateKeys) {
  absl::Status s = Json(R"({"limits": {"memory": "1G", "memory": "64M"}})").status();
  EXPECT_THAT(Message(s), HasSubstr("duplicate key \"limits.memory\""));
  EXPECT_THAT(Message(Json(R"({"env": {"A": "1"}, "env": {}})").status()),
              HasSubstr("duplicate key \"env\""));
}

TEST(ParseJsonPolicyTreeTest, RefusesDeepNesting) {
  std::string deep = std::string(100, '[') + std::string(100, ']');
  absl::StatusOr<PolicyTree> tree = ParseJsonPolicyTree(deep, "/x.json");
  ASSERT_FALSE(tree.ok());
  EXPECT_THAT(Message(tree.status()), HasSubstr("levels deep"));
}

TEST(ParseJsonPolicyTreeTest, KeepsObjectOrder) {
  absl::StatusOr<PolicyTree> tree = ParseJsonPolicyTree(R"({"z": 1, "a": [1, {"b": 2}]})", "/x");
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->dump(), R"({"z":1,"a":[1,{"b":2}]})");
}

TEST(ParseYamlPolicyTreeTest, TypesOnlyJsonSchemaLiterals) {
  LineMap lines;
  absl::StatusOr<PolicyTree> tree = ParseYamlPolicyTree(
      "a: true\nb: false\nc: null\nd: ~\ne:\nf: 12\ng: yes\nh: \"true\"\ni: !!str false\nj: 1.50\n",
      "/x.yaml", &lines);
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->dump(),
            R"({"a":true,"b":false,"c":null,"d":null,"e":null,"f":"12","g":"yes","h":"true",)"
            R"("i":"false","j":"1.50"})");
  EXPECT_EQ(lines["a"], 1);
  EXPECT_EQ(lines["j"], 10);
}

TEST(ParseYamlPolicyTreeTest, RecordsLinesOfKeysAndItems) {
  LineMap lines;
  ASSERT_TRUE(ParseYamlPolicyTree("network:\n  allowedDomains:\n    - a.com\n\n    - b.com\n",
                                  "/x.yaml", &lines)
                  .ok());
  EXPECT_EQ(lines["network"], 1);
  EXPECT_EQ(lines["network.allowedDomains"], 2);
  EXPECT_EQ(lines["network.allowedDomains[0]"], 3);
  EXPECT_EQ(lines["network.allowedDomains[1]"], 5);
}

TEST(ParseYamlPolicyTreeTest, ReportsSyntaxErrorsWithLineAndColumn) {
  absl::Status s = Yaml("limits:\n  memory: 1G\n pids: [\n").status();
  EXPECT_THAT(Message(s), StartsWith("policy file \"/repo/.moat/policy.yaml\", line "));
  EXPECT_THAT(Message(s), HasSubstr("invalid YAML"));
  EXPECT_THAT(Message(Yaml("a: [1, 2").status()), HasSubstr("invalid YAML"));
}

TEST(ParseYamlPolicyTreeTest, RefusesDuplicateKeys) {
  absl::Status s = Yaml("limits:\n  memory: 1G\n  memory: 64M\n").status();
  EXPECT_THAT(Message(s), HasSubstr("line 3"));
  EXPECT_THAT(Message(s), HasSubstr("duplicate key \"limits.memory\""));
}

TEST(ParseYamlPolicyTreeTest, RefusesControlBytesAndSeveralDocuments) {
  EXPECT_THAT(Message(Yaml(absl::string_view("a: 1\nb: x\0y\n", 11)).status()),
              HasSubstr("line 2: contains a NUL byte"));
  EXPECT_THAT(Message(Yaml("a: \x1b[31m\n").status()), HasSubstr("control byte"));
  EXPECT_THAT(Message(Yaml("limits: {}\n---\nlimits: {}\n").status()),
              HasSubstr("2 YAML documents"));
}

TEST(ParseYamlPolicyTreeTest, RefusesUnknownTagsAndComplexKeys) {
  EXPECT_THAT(Message(Yaml("limits: {memory: !!binary aGk=}").status()),
              HasSubstr("unsupported YAML tag"));
  EXPECT_THAT(Message(Yaml("limits: !custom {}").status()), HasSubstr("unsupported YAML tag"));
  EXPECT_THAT(Message(Yaml("? [a, b]\n: 1\n").status()), HasSubstr("keys must be plain text"));
}

TEST(ParseYamlPolicyTreeTest, StopsAliasBombs) {
  // Each level doubles; 2^20 leaves if expanded.
  std::string text = "a0: &a0 [x, x]\n";
  for (int i = 1; i <= 20; ++i) {
    absl::StrAppend(&text, "a", i, ": &a", i, " [*a", i - 1, ", *a", i - 1, "]\n");
  }
  absl::StatusOr<PolicyTree> tree = ParseYamlPolicyTree(text, "/x.yaml", nullptr);
  ASSERT_FALSE(tree.ok());
  EXPECT_THAT(Message(tree.status()), HasSubstr("aliases"));
}

TEST(ParseYamlPolicyTreeTest, RefusesDeepNesting) {
  std::string deep = std::string(60, '[') + std::string(60, ']');
  absl::StatusOr<PolicyTree> tree = ParseYamlPolicyTree(deep, "/x.yaml", nullptr);
  ASSERT_FALSE(tree.ok());
  EXPECT_THAT(Message(tree.status()), HasSubstr("levels deep"));
}

TEST(ParsePolicyTextTest, RefusesOversizedText) {
  std::string big(kMaxPolicyFileBytes + 1, '#');
  EXPECT_THAT(Message(Yaml(big).status()), HasSubstr("larger than"));
}

// Files on disk: a fresh directory per test.
class PolicyFileOnDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "moat_policy_file_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, absl::string_view text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::string dir_;
};

TEST_F(PolicyFileOnDiskTest, ChoosesTheFormatByExtension) {
  PathContext paths{.home = "/home/u", .cwd = dir_};
  // Duplicate keys: the JSON parser names JSON; the same text read as YAML is YAML's error.
  std::string json = Write("p.json", R"({"limits": {"pids": 1, "pids": 2}})");
  EXPECT_THAT(Message(ParsePolicyFile(json, paths).status()), HasSubstr("invalid JSON"));
  std::string yaml = Write("p.yaml", R"({"limits": {"pids": 1, "pids": 2}})");
  EXPECT_THAT(Message(ParsePolicyFile(yaml, paths).status()),
              ::testing::AllOf(HasSubstr("duplicate key"), ::testing::Not(HasSubstr("JSON"))));
  std::string upper = Write("P.JSON", R"({"limits": {"pids": 3}})");
  absl::StatusOr<PolicyLayer> layer = ParsePolicyFile(upper, paths);
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_EQ(layer->pids, 3u);
}

TEST_F(PolicyFileOnDiskTest, RelativePathsAreTakenFromCwdAndReportedAbsolute) {
  Write("rel.yaml", "limits: {pids: 4}\n");
  PathContext paths{.home = "/home/u", .cwd = dir_};
  absl::StatusOr<PolicyLayer> layer = ParsePolicyFile("rel.yaml", paths);
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_EQ(layer->source, dir_ + "/rel.yaml");
  EXPECT_EQ(layer->pids, 4u);
}

TEST_F(PolicyFileOnDiskTest, MissingFileIsNotFound) {
  absl::StatusOr<PolicyLayer> layer = ParsePolicyFile(dir_ + "/absent.yaml", PathContext{});
  EXPECT_EQ(layer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(layer.status()), HasSubstr(dir_ + "/absent.yaml"));
}

TEST_F(PolicyFileOnDiskTest, DirectoriesAndFifosAreRefusedWithoutBlocking) {
  std::filesystem::create_directory(dir_ + "/d.yaml");
  absl::StatusOr<PolicyLayer> d = ParsePolicyFile(dir_ + "/d.yaml", PathContext{});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(d.status()), HasSubstr("not a regular file"));

  std::string fifo = dir_ + "/f.yaml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<PolicyLayer> f = ParsePolicyFile(fifo, PathContext{});  // must return, not hang
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(PolicyFileOnDiskTest, OversizedFilesAreRefused) {
  std::string path = Write("big.yaml", std::string(kMaxPolicyFileBytes + 10, '#'));
  absl::StatusOr<PolicyLayer> layer = ParsePolicyFile(path, PathContext{});
  ASSERT_FALSE(layer.ok());
  EXPECT_THAT(Message(layer.status()), HasSubstr("larger than"));
}

// Pi's default denyWrite globs: without a directory they mean any depth below the project; with
// one, that directory only. Exact paths stay exact.
TEST(ParsePolicyTextTest, DenyGlobsArePatterns) {
  absl::StatusOr<PolicyLayer> layer = Json(R"({"filesystem": {
      "denyWrite": ["*.pem", ".env.*", "~/certs/*.key", "/etc/ssl/x.crt"],
      "denyRead": ["secrets/*"]}})");
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_THAT(*layer->deny_write_patterns,
              ElementsAre("/repo/**/*.pem", "/repo/**/.env.*", "/home/u/certs/*.key"));
  EXPECT_THAT(*layer->deny_write, ElementsAre("/etc/ssl/x.crt"));
  EXPECT_THAT(*layer->deny_read_patterns, ElementsAre("/repo/secrets/*"));
  EXPECT_THAT(*layer->deny_read, ::testing::IsEmpty());
}

}  // namespace
}  // namespace moat::sandbox
