#include "controller/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(absl::string_view yaml) {
  auto c = ParseConfig(yaml, "c.yaml");
  EXPECT_FALSE(c.ok()) << yaml;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ControllerConfigTest, AnEmptyFileGivesTheDocumentedDefaults) {
  auto c = ParseConfig("", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_address, "127.0.0.1");
  EXPECT_EQ(c->port, 8080);
  EXPECT_EQ(c->state_dir, "/var/lib/moat-controller");
  EXPECT_EQ(c->store, StoreKind::kSqlite);
  EXPECT_EQ(c->overcommit.cpu, 4);
  EXPECT_EQ(c->overcommit.memory, 1);
  EXPECT_EQ(c->heartbeat_interval, absl::Seconds(5));
  EXPECT_EQ(c->heartbeat_misses, 3);
  EXPECT_EQ(c->ProfileForImage("anything:1"), "default");
}

TEST(ControllerConfigTest, ParsesEveryKey) {
  auto c = ParseConfig(R"(
listen: {address: 0.0.0.0, port: 9000}
tls: {cert: /etc/moat/c.crt, key: /etc/moat/c.key}
state_dir: /srv/moat
store: {kind: memory}
api_keys_file: /etc/moat/keys
join_token_file: /etc/moat/join
images:
  - {image: "python:*", profile: python}
  - {image: "node:20", profile: node}
nodes: {heartbeat_interval: 2s, misses: 4, lost_after: 1m, tls: {ca: /etc/moat/agents-ca.pem}}
scheduling: {overcommit: {cpu: 8, memory: 1.5, pids: 2}, best_of_k: 5, retries: 2}
api: {max_request_bytes: 64KiB, default_timeout: 5m, max_timeout: 1h, create_timeout: 10s}
)",
                       "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port, 9000);
  EXPECT_EQ(c->tls_key_file, "/etc/moat/c.key");
  EXPECT_EQ(c->store, StoreKind::kMemory);
  EXPECT_EQ(c->ProfileForImage("python:3.11"), "python");
  EXPECT_EQ(c->ProfileForImage("node:20"), "node");
  EXPECT_EQ(c->ProfileForImage("node:21"), "");  // No catch-all once images are listed.
  EXPECT_EQ(c->lost_after, absl::Minutes(1));
  EXPECT_EQ(c->nodes_ca_file, "/etc/moat/agents-ca.pem");
  EXPECT_EQ(c->overcommit.memory, 1.5);
  EXPECT_EQ(c->best_of_k, 5);
  EXPECT_EQ(c->max_request_bytes, 64u << 10);
  EXPECT_EQ(c->create_timeout, absl::Seconds(10));
}

TEST(ControllerConfigTest, ErrorsNameTheKeyAndWhatToDo) {
  EXPECT_THAT(ErrorOf("listen: {prot: 1}"), HasSubstr("\"listen.prot\" is not a known key"));
  EXPECT_THAT(ErrorOf("store: {kind: redis}"), HasSubstr("\"sqlite\""));
  EXPECT_THAT(ErrorOf("images: [{image: \"py*thon\", profile: p}]"), HasSubstr("at its end"));
  EXPECT_THAT(ErrorOf("images: [{image: x, profile: Bad}]"), HasSubstr("lower-case"));
  EXPECT_THAT(ErrorOf("nodes: {heartbeat_interval: 5s, misses: 3, lost_after: 10s}"),
              HasSubstr("lost before it is NotReady"));
  EXPECT_THAT(ErrorOf("nodes: {tls: {ca: ca.pem}}"),
              HasSubstr("\"nodes.tls.ca\" must be an absolute path"));
  EXPECT_THAT(ErrorOf("nodes: {tls: {cert: /c.pem}}"),
              HasSubstr("\"nodes.tls.cert\" is not a known key"));
  EXPECT_THAT(ErrorOf("scheduling: {overcommit: {cpu: 0.5}}"), HasSubstr("from 1 to 100"));
  EXPECT_THAT(ErrorOf("api: {default_timeout: 2h, max_timeout: 1h}"), HasSubstr("api."));
  EXPECT_THAT(ErrorOf("tls: {cert: relative.crt, key: /k}"), HasSubstr("absolute path"));
  EXPECT_THAT(ErrorOf("listen: [1"), HasSubstr("not valid YAML"));
  EXPECT_THAT(ErrorOf("state_dir: /x\nextra: 1"), HasSubstr("c.yaml:2"));
}

TEST(ControllerConfigTest, TheEtcdStoreAndLeaderElection) {
  auto c = ParseConfig(R"(
store:
  engine: etcd
  endpoints: [http://10.0.0.1:2379, https://10.0.0.2:2379]
  tls: {ca: /etc/moat/etcd-ca.crt, cert: /etc/moat/etcd.crt, key: /etc/moat/etcd.key}
  prefix: fleet-a/
leader_election: {advertise_url: http://10.0.0.5:8080, lease_ttl: 20s, renew_deadline: 12s}
)",
                       "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->store, StoreKind::kEtcd);
  EXPECT_THAT(c->etcd.endpoints,
              ::testing::ElementsAre("http://10.0.0.1:2379", "https://10.0.0.2:2379"));
  EXPECT_EQ(c->etcd.ca_file, "/etc/moat/etcd-ca.crt");
  EXPECT_EQ(c->etcd.key_file, "/etc/moat/etcd.key");
  EXPECT_EQ(c->etcd.prefix, "fleet-a/");
  EXPECT_EQ(c->leader_election.advertise_url, "http://10.0.0.5:8080");
  EXPECT_EQ(c->leader_election.lease_ttl, absl::Seconds(20));
  EXPECT_EQ(c->leader_election.renew_interval, absl::Seconds(2));
  auto defaults = ParseConfig("store: {kind: etcd, endpoints: [http://127.0.0.1:2379]}", "c.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->leader_election.lease_ttl, absl::Seconds(15));
  EXPECT_EQ(defaults->leader_election.renew_deadline, absl::Seconds(10));
  EXPECT_EQ(defaults->etcd.prefix, "moat/");

  EXPECT_THAT(ErrorOf("store: {kind: etcd}"), HasSubstr("client URLs"));
  EXPECT_THAT(ErrorOf("store: {kind: etcd, endpoints: [127.0.0.1:2379]}"),
              HasSubstr("http://HOST:PORT"));
  EXPECT_THAT(ErrorOf("store: {kind: sqlite, endpoints: [http://a:1]}"),
              HasSubstr("etcd store only"));
  EXPECT_THAT(ErrorOf("store: {kind: etcd, endpoints: [http://a:1], tls: {cert: /c}}"),
              HasSubstr("both cert and key"));
  EXPECT_THAT(ErrorOf("leader_election: {lease_ttl: 5s}"), HasSubstr("renew_deadline < lease_ttl"));
}

TEST(ApiKeysTest, TenantAndKeyPerLine) {
  auto keys =
      ParseApiKeys("# comment\nacme 0123456789abcdef0123\n\nfedcba9876543210fedcba\n", "keys");
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].tenant, "acme");
  EXPECT_EQ((*keys)[1].tenant, "default");
  EXPECT_THAT(std::string(ParseApiKeys("a short\n", "keys").status().message()),
              HasSubstr("shorter than 16"));
  EXPECT_THAT(
      std::string(
          ParseApiKeys("a 0123456789abcdef\nb 0123456789abcdef\n", "keys").status().message()),
      HasSubstr("repeats"));
  EXPECT_FALSE(ParseApiKeys("# nothing\n", "keys").ok());
}

}  // namespace
}  // namespace moat::controller

namespace moat::controller {
namespace {

TEST(ControllerConfigTest, AdminPrecheckAndLanguages) {
  auto c = ParseConfig(
      "admin_key_file: /etc/moat/admin.key\n"
      "precheck: {enabled: false, medium_policy: no-net, approval_timeout: 30s, max_pending: 3}\n"
      "languages: {python: {wall: 60s, cpu: 15s}, go: {wall: 10s, cpu: 10s}}\n"
      "max_declared_duration: 2m\n",
      "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin_key_file, "/etc/moat/admin.key");
  EXPECT_FALSE(c->precheck.enabled);
  EXPECT_EQ(c->precheck.medium_policy, "no-net");
  EXPECT_EQ(c->precheck.approval_timeout, absl::Seconds(30));
  EXPECT_EQ(c->precheck.max_pending, 3);
  ASSERT_EQ(c->languages.size(), 2u);
  EXPECT_EQ(c->languages[1].name, "go");
  EXPECT_EQ(c->languages[1].cpu, absl::Seconds(10));
  EXPECT_EQ(c->max_declared_duration, absl::Minutes(2));
  EXPECT_THAT(ErrorOf("max_declared_duration: 10m\n"), HasSubstr("max_declared_duration"));
  EXPECT_THAT(ErrorOf("precheck: {enabled: maybe}\n"), HasSubstr("precheck.enabled"));
  EXPECT_THAT(ErrorOf("languages: {python: {wal: 1s}}\n"), HasSubstr("wal"));
}

TEST(ControllerConfigTest, AuditRetention) {
  auto defaults = ParseConfig("", "c.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->precheck.audit_max_age, absl::Hours(24 * 30));
  EXPECT_EQ(defaults->precheck.audit_max_records, 10000);
  auto c = ParseConfig("precheck: {audit_max_age: 168h, audit_max_records: 500}\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precheck.audit_max_age, absl::Hours(168));
  EXPECT_EQ(c->precheck.audit_max_records, 500);
  EXPECT_THAT(ErrorOf("precheck: {audit_max_records: 0}\n"),
              HasSubstr("precheck.audit_max_records"));
  EXPECT_THAT(ErrorOf("precheck: {audit_max_age: 1s}\n"), HasSubstr("precheck.audit_max_age"));
}

}  // namespace
}  // namespace moat::controller
