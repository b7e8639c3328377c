// A fleet over TLS with a private CA (docs/controller.md, "Joining"): the agents verify the
// controller (`controller.tls.ca`), the controller verifies its agents (`nodes.tls.ca`), and a
// side that cannot verify the other sends it nothing.
#include <httplib.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "e2e/controller/fleet.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/testing/test_ca.h"

namespace moat::e2e {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kRun[] = R"({"image": {"uri": "python:3.11"}, "command": "echo over-tls"})";

class FleetTlsE2eTest : public FleetTest {
 protected:
  void StartFleet() override {
    // The certificate names the address the daemons are reached at, 127.0.0.1.
    auto ca = moat::testing::MakeTestCa(fleet_->dir(), {"IP:127.0.0.1"});
    if (absl::IsFailedPrecondition(ca.status())) GTEST_SKIP() << ca.status();
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
  }

  moat::testing::TestCa ca_;
};

TEST_F(FleetTlsE2eTest, TheControllerAndItsAgentsVerifyEachOther) {
  fleet_->UseTls(ca_);
  ASSERT_TRUE(fleet_->StartController().ok()) << fleet_->controller().Log();
  // Ready: the agent trusted the controller (join and heartbeats over https).
  ASSERT_TRUE(fleet_->StartAgent({.name = "a1"}).ok());
  // The controller trusted the agent: a run placed on it...
  auto [status, result] = fleet_->Call("POST", "/v1/run", kRun);
  ASSERT_EQ(status, 200) << result.dump() << fleet_->controller().Log();
  EXPECT_EQ(result["stdout"], "over-tls\n");
  // ...and a command through the proxy to the sandbox's API on the agent.
  auto [created, sb] =
      fleet_->Call("POST", "/v1/sandboxes",
                   R"({"image": {"uri": "python:3.11"}, "entrypoint": ["tail", "-f", "/dev/null"],
          "timeout": 600, "resourceLimits": {"cpu": "250m", "memory": "128Mi"}})");
  ASSERT_EQ(created, 202) << sb.dump();
  httplib::Client client(absl::StrCat("https://127.0.0.1:", fleet_->controller().port()));
  client.set_ca_cert_path(ca_.ca_pem.c_str());
  client.set_read_timeout(30, 0);
  auto proxied =
      client.Post(absl::StrCat("/sandboxes/", sb["id"].get<std::string>(), "/proxy/44772/command"),
                  {{"OPEN-SANDBOX-API-KEY", fleet_->api_key()}},
                  json{{"command", "echo proxied"}}.dump(), "application/json");
  ASSERT_TRUE(proxied) << httplib::to_string(proxied.error());
  EXPECT_EQ(proxied->status, 200) << proxied->body;
  EXPECT_THAT(proxied->body, HasSubstr("proxied"));
  // A client that does not trust the CA gets no answer.
  httplib::Client untrusting(absl::StrCat("https://127.0.0.1:", fleet_->controller().port()));
  auto refused = untrusting.Get("/health");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), httplib::Error::SSLServerVerification);

  // An agent that trusts another CA sends the controller nothing, and says what to set.
  ASSERT_TRUE(
      fleet_->StartAgent({.name = "a2", .controller_ca = ca_.other_pem, .wait_until_ready = false})
          .ok());
  EXPECT_TRUE(
      Fleet::WaitFor([&] { return absl::StrContains(fleet_->agent("a2").Log(), "not trusted"); },
                     absl::Seconds(20)))
      << fleet_->agent("a2").Log();
  EXPECT_THAT(fleet_->agent("a2").Log(), HasSubstr("controller.tls.ca"));
  EXPECT_EQ(fleet_->NodeState("a2"), "");
}

TEST_F(FleetTlsE2eTest, AControllerThatCannotVerifyItsAgentPlacesNothingThere) {
  // The agent trusts the controller, so it joins; the controller trusts another CA than the
  // one that signed the agent's certificate, so it never calls the agent.
  fleet_->UseTls(ca_, /*nodes_ca=*/ca_.other_pem);
  ASSERT_TRUE(fleet_->StartController().ok()) << fleet_->controller().Log();
  ASSERT_TRUE(fleet_->StartAgent({.name = "a1", .pool_floor = 0}).ok());
  auto [status, result] = fleet_->Call("POST", "/v1/run", kRun);
  EXPECT_GE(status, 500) << result.dump();
  EXPECT_THAT(result.dump(), HasSubstr("not trusted")) << fleet_->controller().Log();
  EXPECT_THAT(result.dump(), HasSubstr("nodes.tls.ca"));
  // Nothing ran on the agent.
  auto [listed, sandboxes] = fleet_->AgentCall("a1", "GET", "/v1/sandboxes");
  EXPECT_EQ(listed, 200);
  EXPECT_TRUE(sandboxes["items"].empty()) << sandboxes.dump();
}

}  // namespace
}  // namespace moat::e2e
