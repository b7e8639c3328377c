// Tenants end to end: the real controller and a real agent. Two tenants made through the admin
// API try to reach each other's sandboxes through every route; quotas refuse with the quota's
// name; rotated and revoked keys stop; a high-risk command through the proxy waits for an
// administrator (issue 13, points 3 and 4).
#include <signal.h>

#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "e2e/controller/fleet.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace moat::e2e {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class TenantsE2eTest : public FleetTest {
 protected:
  void StartFleet() override {
    fleet_->set_extra_config("precheck: {approval_timeout: 20s}\n");
    ASSERT_TRUE(fleet_->StartController().ok()) << fleet_->controller().Log();
    ASSERT_TRUE(fleet_->StartAgent({.name = "n1"}).ok());
  }

  std::pair<int, json> Admin(const std::string& method, const std::string& path,
                             const std::string& body = "") {
    return fleet_->CallWith({{"Authorization", "Bearer " + fleet_->admin_key()}}, method, path,
                            body);
  }
  std::pair<int, json> As(const std::string& key, const std::string& method,
                          const std::string& path, const std::string& body = "") {
    return fleet_->CallWith({{"OPEN-SANDBOX-API-KEY", key}}, method, path, body);
  }
  // The first held approval, once the controller lists one (waits up to 10 s; empty if none).
  json FirstPendingApproval() {
    json first;
    Fleet::WaitFor(
        [&] {
          auto [s, pending] = Admin("GET", "/v1/admin/approvals");
          if (s != 200 || !pending.is_object() || pending["items"].empty()) return false;
          first = pending["items"][0];
          return true;
        },
        absl::Seconds(10));
    return first;
  }
  // A tenant and its first key (the plaintext, shown once).
  std::string NewTenant(const std::string& name, const json& quota = json::object()) {
    auto [st, t] =
        Admin("POST", "/v1/admin/tenants", json{{"name", name}, {"quota", quota}}.dump());
    EXPECT_EQ(st, 201) << t.dump();
    auto [kst, k] = Admin("POST", "/v1/admin/tenants/" + name + "/keys");
    EXPECT_EQ(kst, 201) << k.dump();
    return k.value("key", "");
  }
};

TEST_F(TenantsE2eTest, TenantsCannotReachEachOthersSandboxesThroughAnyRoute) {
  const std::string acme = NewTenant("acme"), globex = NewTenant("globex");
  auto [st, sb] = As(acme, "POST", "/v1/sandboxes", kCreate);
  ASSERT_EQ(st, 202) << sb.dump() << fleet_->controller().Log();
  const std::string id = sb["id"];
  const std::string base = "/v1/sandboxes/" + id;

  // The owner reaches it everywhere.
  EXPECT_EQ(As(acme, "GET", base).first, 200);
  EXPECT_EQ(As(acme, "GET", base + "/endpoints/44772").first, 200);
  EXPECT_EQ(As(acme, "GET", "/v1/sandboxes").second["items"].size(), 1u);

  // The other tenant: 404 on every route, as if there were no such sandbox, and nothing moves.
  struct Route {
    const char *method, *path, *body;
  } routes[] = {
      {"GET", "", ""},
      {"GET", "/endpoints/44772", ""},
      {"GET", "/proxy/44772/ping", ""},
      {"POST", "/proxy/44772/command", R"({"command": "echo hi"})"},
      {"POST", "/renew-expiration", R"({"expiresAt": "2099-01-01T00:00:00Z"})"},
      {"PATCH", "/metadata", R"({"owner": "globex"})"},
      {"POST", "/pause", ""},
      {"POST", "/resume", ""},
      {"DELETE", "", ""},
  };
  for (const Route& r : routes) {
    for (const std::string prefix : {"/v1/sandboxes/", "/sandboxes/"}) {
      auto [code, body] = As(globex, r.method, prefix + id + r.path, r.body);
      EXPECT_EQ(code, 404) << r.method << " " << prefix << id << r.path << ": " << body.dump();
    }
  }
  auto [lst, list] = As(globex, "GET", "/v1/sandboxes");
  EXPECT_EQ(lst, 200);
  EXPECT_TRUE(list["items"].empty()) << list.dump();
  // Still there, unchanged, for its owner.
  auto [gst, got] = As(acme, "GET", base);
  EXPECT_EQ(gst, 200);
  EXPECT_FALSE(got.dump().find("globex") != std::string::npos) << got.dump();
  // A key that is no key, and no key at all: 401.
  EXPECT_EQ(As("msk_0123456789abcdef_" + std::string(64, '0'), "GET", base).first, 401);
  EXPECT_EQ(fleet_->CallWith({}, "GET", base).first, 401);
  // Node administration touches every tenant's sandboxes: not for a tenant's key.
  auto [cst, cordon] = As(globex, "POST", "/v1/nodes/n1/cordon");
  EXPECT_EQ(cst, 403) << cordon.dump();
  EXPECT_EQ(fleet_->Call("POST", "/v1/nodes/n1/cordon").first, 200);  // The operator's file key.
  EXPECT_EQ(Admin("POST", "/v1/nodes/n1/uncordon").first, 200);
  EXPECT_EQ(As(acme, "DELETE", base).first, 204);
}

TEST_F(TenantsE2eTest, QuotasRefuseWithTheQuotasName) {
  const std::string key = NewTenant("small", {{"max_sandboxes", 1}, {"creates_per_minute", 60}});
  auto [st, sb] = As(key, "POST", "/v1/sandboxes", kCreate);
  ASSERT_EQ(st, 202) << sb.dump();
  auto [st2, refused] = As(key, "POST", "/v1/sandboxes", kCreate);
  EXPECT_EQ(st2, 403) << refused.dump();
  EXPECT_THAT(refused.value("message", ""), HasSubstr("quota.max_sandboxes"));
  // The create rate is checked before the rest: at 1 a minute the second create is a 429.
  auto [qst, q] =
      Admin("PUT", "/v1/admin/tenants/small/quota", R"({"max_cpu": 0.5, "creates_per_minute": 1})");
  ASSERT_EQ(qst, 200) << q.dump();
  EXPECT_EQ(As(key, "POST", "/v1/sandboxes", kCreate).first, 202);
  auto [st3, rate] = As(key, "POST", "/v1/sandboxes", kCreate);
  EXPECT_EQ(st3, 429) << rate.dump();
  EXPECT_THAT(rate.value("message", ""), HasSubstr("quota.creates_per_minute"));
  // CPU: 0.5 of 0.5 cores in use, 0.25 more asked.
  ASSERT_EQ(Admin("PUT", "/v1/admin/tenants/small/quota", R"({"max_cpu": 0.5})").first, 200);
  auto [st4, cpu] = As(key, "POST", "/v1/sandboxes", kCreate);
  EXPECT_EQ(st4, 403) << cpu.dump();
  EXPECT_THAT(cpu.value("message", ""), HasSubstr("quota.max_cpu"));
  // The usage is in the admin API and the metrics, by tenant.
  auto [tst, t] = Admin("GET", "/v1/admin/tenants/small");
  EXPECT_EQ(t["usage"]["sandboxes"], 2) << t.dump();
  httplib::Client client("127.0.0.1", fleet_->controller().port());
  ASSERT_TRUE(Fleet::WaitFor(
      [&] {
        auto m = client.Get("/metrics");
        return m && m->body.find("moat_controller_tenant_sandboxes{tenant=\"small\"} 2") !=
                        std::string::npos;
      },
      absl::Seconds(5)));
  auto m = client.Get("/metrics");
  ASSERT_TRUE(m);
  for (const char* line : {"moat_controller_quota_rejections_total{quota=\"max_cpu\","
                           "tenant=\"small\"} 1",
                           "moat_controller_quota_rejections_total{quota=\"max_sandboxes\","
                           "tenant=\"small\"} 1",
                           "moat_controller_quota_rejections_total{quota=\"creates_per_minute\","
                           "tenant=\"small\"} 1"}) {
    EXPECT_TRUE(m->body.find(line) != std::string::npos) << line;
  }
}

TEST_F(TenantsE2eTest, RotatedAndRevokedKeysStopAndTheAdminApiNeedsTheAdminKey) {
  const std::string key = NewTenant("acme");
  EXPECT_EQ(As(key, "GET", "/v1/sandboxes").first, 200);
  auto [ks, keys] = Admin("GET", "/v1/admin/tenants/acme/keys");
  ASSERT_EQ(keys["items"].size(), 1u);
  EXPECT_FALSE(keys.dump().find(key.substr(21)) != std::string::npos) << "a listing shows a secret";
  const std::string id = keys["items"][0]["id"];
  auto [rs, rotated] = Admin("POST", "/v1/admin/keys/" + id + "/rotate");
  ASSERT_EQ(rs, 200) << rotated.dump();
  const std::string next = rotated["key"];
  EXPECT_EQ(As(key, "GET", "/v1/sandboxes").first, 401);
  EXPECT_EQ(As(next, "GET", "/v1/sandboxes").first, 200);
  EXPECT_EQ(Admin("DELETE", "/v1/admin/keys/" + std::string(rotated["id"])).first, 204);
  EXPECT_EQ(As(next, "GET", "/v1/sandboxes").first, 401);
  // A tenant's key is not the admin key.
  EXPECT_EQ(
      fleet_->CallWith({{"Authorization", "Bearer " + next}}, "GET", "/v1/admin/tenants").first,
      401);
  EXPECT_EQ(As(fleet_->admin_key(), "GET", "/v1/admin/tenants").first, 401);
  EXPECT_EQ(Admin("POST", "/v1/admin/tenants", R"({"name": "acme"})").first, 409);
  EXPECT_EQ(Admin("POST", "/v1/admin/tenants", R"({"name": "Bad/Name"})").first, 400);
  EXPECT_EQ(Admin("POST", "/v1/admin/tenants", R"({"name": "x", "quota": {"cpus": 1}})").first,
            400);
}

TEST_F(TenantsE2eTest, AHighRiskCommandWaitsForAnAdministrator) {
  const std::string key = NewTenant("acme");
  auto [st, sb] = As(key, "POST", "/v1/sandboxes", kCreate);
  ASSERT_EQ(st, 202) << sb.dump();
  const std::string command = "/v1/sandboxes/" + std::string(sb["id"]) + "/proxy/44772/command";
  httplib::Client client("127.0.0.1", fleet_->controller().port());
  client.set_read_timeout(60, 0);
  const httplib::Headers auth = {{"OPEN-SANDBOX-API-KEY", key}};

  // Low: runs at once, tagged low.
  auto low = client.Post(command, auth, R"({"command": "echo hello"})", "application/json");
  ASSERT_TRUE(low);
  EXPECT_EQ(low->status, 200) << low->body;
  EXPECT_EQ(low->get_header_value("X-Moat-Precheck-Risk"), "low");
  EXPECT_THAT(low->body, HasSubstr("hello"));

  // High, rejected: the caller waits, then gets a 403 with the reason.
  auto send_high = [&](std::optional<httplib::Response>* out) {
    auto res = client.Post(command, auth, R"({"command": "curl -s http://127.0.0.1:9/x | sh"})",
                           "application/json");
    if (res) *out = *res;
  };
  auto decide = [&](const std::string& verb, const std::string& reason) {
    const json held = FirstPendingApproval();
    ASSERT_TRUE(held.is_object()) << "no command was held for approval";
    EXPECT_EQ(held["state"], "PendingApproval");
    EXPECT_THAT(held["tags"].dump(), HasSubstr("download-exec"));
    const std::string id = held["id"];
    auto [s, d] =
        Admin("POST", "/v1/admin/approvals/" + id + "/" + verb, json{{"reason", reason}}.dump());
    EXPECT_EQ(s, 200) << d.dump();
  };
  std::optional<httplib::Response> rejected;
  std::thread waiter([&] { send_high(&rejected); });
  decide("reject", "downloads and runs a script");
  waiter.join();
  ASSERT_TRUE(rejected);
  EXPECT_EQ(rejected->status, 403) << rejected->body;
  EXPECT_THAT(rejected->body, HasSubstr("downloads and runs a script"));
  EXPECT_EQ(rejected->get_header_value("X-Moat-Precheck-Risk"), "high");

  // High, approved: forwarded to the sandbox (the command itself then fails: port 9 is closed).
  std::optional<httplib::Response> approved;
  std::thread waiter2([&] { send_high(&approved); });
  decide("approve", "checked");
  waiter2.join();
  ASSERT_TRUE(approved);
  EXPECT_EQ(approved->status, 200) << approved->body;

  // The audit trail has the run, both holds and both decisions.
  auto [as, audit] = Admin("GET", "/v1/admin/audit");
  ASSERT_EQ(as, 200);
  std::string trail = audit.dump();
  EXPECT_THAT(trail, HasSubstr("\"Rejected\""));
  EXPECT_THAT(trail, HasSubstr("\"Approved\""));
  EXPECT_THAT(trail, HasSubstr("downloads and runs a script"));
  EXPECT_EQ(audit["items"].size(), 4u) << trail;  // 2 holds + 2 decisions; "echo" has no tag.
}

// A held command outlives the controller that held it: SIGKILL while the caller waits (its
// connection closes), and after the restart the hold is still listed, the administrator's
// approval works, and the caller's retry of the same command runs with that approval.
TEST_F(TenantsE2eTest, AHeldCommandSurvivesAControllerKill) {
  const std::string key = NewTenant("acme");
  auto [st, sb] = As(key, "POST", "/v1/sandboxes", kCreate);
  ASSERT_EQ(st, 202) << sb.dump();
  ASSERT_EQ(sb["status"]["state"], "Running");
  const std::string command = "/v1/sandboxes/" + std::string(sb["id"]) + "/proxy/44772/command";
  const std::string high = R"({"command": "curl -s http://127.0.0.1:9/x | sh"})";
  const httplib::Headers auth = {{"OPEN-SANDBOX-API-KEY", key}};
  std::thread waiter([&] {
    httplib::Client client("127.0.0.1", fleet_->controller().port());
    client.set_read_timeout(60, 0);
    auto res = client.Post(command, auth, high, "application/json");
    EXPECT_FALSE(res && res->status == 200) << "ran without an approval";
  });
  const json held = FirstPendingApproval();
  ASSERT_TRUE(held.is_object()) << "no command was held for approval";
  const std::string id = held["id"];
  fleet_->controller().Kill(SIGKILL);
  waiter.join();
  ASSERT_TRUE(fleet_->StartController().ok()) << fleet_->controller().Log();
  auto [ls, listed] = Admin("GET", "/v1/admin/approvals");
  ASSERT_EQ(ls, 200);
  ASSERT_EQ(listed["items"].size(), 1u) << "the hold was lost with the controller";
  EXPECT_EQ(listed["items"][0]["id"], id);
  auto [ds, d] = Admin("POST", "/v1/admin/approvals/" + id + "/approve",
                       json{{"reason", "checked after the restart"}}.dump());
  ASSERT_EQ(ds, 200) << d.dump();
  ASSERT_TRUE(
      Fleet::WaitFor([&] { return fleet_->NodeState("n1") == "Ready"; }, absl::Seconds(20)));
  httplib::Client client("127.0.0.1", fleet_->controller().port());
  client.set_read_timeout(60, 0);
  auto retried = client.Post(command, auth, high, "application/json");
  ASSERT_TRUE(retried);
  EXPECT_EQ(retried->status, 200) << retried->body;
  EXPECT_EQ(retried->get_header_value("X-Moat-Approval-Id"), id);
  EXPECT_TRUE(Admin("GET", "/v1/admin/approvals").second["items"].empty());
}

// POST /v1/run goes through the same gate: low-risk code runs; high-risk code waits in
// PendingApproval and a rejection answers 403 with the reason, before any sandbox is made.
TEST_F(TenantsE2eTest, RunInOneCallIsPreCheckedToo) {
  const std::string key = NewTenant("acme");
  const json low_run = {{"code", "print(6 * 7)"}, {"language", "python"}};
  auto [lst, low] = As(key, "POST", "/v1/run", low_run.dump());
  ASSERT_EQ(lst, 200) << low.dump();
  EXPECT_THAT(low.dump(), HasSubstr("42"));

  const json high_run = {{"code", "curl -s http://127.0.0.1:9/x | sh"}, {"language", "sh"}};
  std::pair<int, json> held;
  std::thread waiter([&] { held = As(key, "POST", "/v1/run", high_run.dump()); });
  const json held_run = FirstPendingApproval();
  EXPECT_TRUE(held_run.is_object()) << "no run was held for approval";
  const std::string id = held_run.value("id", "");
  auto [ds, d] = Admin("POST", "/v1/admin/approvals/" + id + "/reject",
                       json{{"reason", "shells out to a download"}}.dump());
  EXPECT_EQ(ds, 200) << d.dump();
  waiter.join();
  EXPECT_EQ(held.first, 403) << held.second.dump();
  EXPECT_THAT(held.second.dump(), HasSubstr("shells out to a download"));
}

}  // namespace
}  // namespace moat::e2e
