// The admin API for real: its routes on an httplib server on 127.0.0.1, the registry and the
// approval queue on a MemoryStore.
#include "controller/admin_api.h"

#include <httplib.h>

#include "controller/store/memory_store.h"
#include "controller/testing/fake_agents.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/http/server.h"

namespace moat::controller {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAdminKey[] = "admin-key-0123456789abcdef";

class AdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    admin_.Register(server_);
    absl::StatusOr<int> port = serving_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }

  // The message of an error answer with `status`.
  std::string ErrorMessage(const httplib::Result& res, int status) {
    EXPECT_TRUE(res);
    if (!res) return "";
    EXPECT_EQ(res->status, status) << res->body;
    json body = json::parse(res->body, nullptr, false);
    EXPECT_TRUE(body.is_object()) << res->body;
    return body.is_object() ? body.value("message", "") : "";
  }

  httplib::Headers Admin() { return {{"Authorization", std::string("Bearer ") + kAdminKey}}; }

  MemoryStore store_;
  FakeClock clock_;
  TenantRegistry tenants_{&store_, &clock_, /*hash_rounds=*/1000};
  precheck::ApprovalQueue approvals_{&store_, &clock_, absl::Seconds(20), /*max_pending=*/2};
  // For the tenants' usage: no node, no sandbox.
  NodeTable nodes_{&clock_, NodeTableOptions{}};
  testing::FakeAgents agents_;
  scheduler::Scheduler scheduler_;
  ControllerMetrics metrics_;
  SandboxManager sandboxes_{&store_, &nodes_, &agents_, &scheduler_, &metrics_, &clock_, {}};
  AdminApi admin_{kAdminKey, &tenants_, &approvals_, &sandboxes_};
  httplib::Server server_;
  http::ServerThread serving_{&server_};
  std::unique_ptr<httplib::Client> client_;
};

// A client's field name is quoted and escaped in the error (util/quote.h): a newline or a
// quote in it cannot forge a log line or end the quoted value early.
TEST_F(AdminApiTest, AClientsValueIsQuotedInTheError) {
  const std::string forged = "x\"\n[error] forged";
  const std::string shown = R"("x\"\n[error] forged")";
  std::string unknown = ErrorMessage(
      client_->Post("/v1/admin/tenants", Admin(),
                    json{{"name", "acme"}, {"quota", {{forged, 1}}}}.dump(), "application/json"),
      400);
  EXPECT_THAT(unknown, HasSubstr("unknown quota field " + shown + "; use max_sandboxes"));
  EXPECT_THAT(unknown, Not(HasSubstr("\n")));
}

}  // namespace
}  // namespace moat::controller
