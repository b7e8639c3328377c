// Bash sessions of the per-sandbox API (OpenSandbox's /session, /session/{id}/run, DELETE
// /session/{id}) on the real daemon: a session keeps its variables (exported or not), functions
// and working directory between runs, sessions do not see each other's, a failing run is the
// error event, and a deleted or unknown session is a 404.
#include <httplib.h>
#include <unistd.h>

#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "e2e/agent/agent_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;

class SessionE2eTest : public OneSandboxTest {
 protected:
  SessionE2eTest() : OneSandboxTest("/bin/bash") {}

  // (status, body) of a non-streaming call.
  std::pair<int, nlohmann::json> Call(const std::string& method, const std::string& route,
                                      const std::string& body, const std::string& token) {
    httplib::Client client("127.0.0.1", agent_->port());
    httplib::Headers headers{{"X-EXECD-ACCESS-TOKEN", token}};
    const std::string path = absl::StrCat("/v1/sandboxes/", id_, "/execd", route);
    httplib::Result res = method == "POST" ? client.Post(path, headers, body, "application/json")
                                           : client.Delete(path, headers);
    if (!res) return {0, nullptr};
    return {res->status, nlohmann::json::parse(res->body, nullptr, false)};
  }

  std::string NewSession(const std::string& body = "") {
    auto [status, reply] = Call("POST", "/session", body, token_);
    EXPECT_EQ(status, 200) << reply.dump();
    return reply.is_object() ? reply.value("session_id", "") : "";
  }

  CommandRun RunIn(const std::string& session, const std::string& command) {
    return agent_->RunAt(id_, token_, absl::StrCat("/session/", session, "/run"),
                         {{"command", command}});
  }
};

TEST_F(SessionE2eTest, KeepsShellStateBetweenRuns) {
  const std::string s = NewSession(R"({"cwd": "/workspace"})");
  ASSERT_THAT(s, HasSubstr("session-"));
  CommandRun first = RunIn(s, "pwd; x=1; export Y=two; f() { echo fn$1; }; cd /tmp");
  EXPECT_EQ(first.http_status, 200);
  EXPECT_TRUE(first.completed);
  EXPECT_EQ(first.stdout_text, "/workspace\n");
  CommandRun second = RunIn(s, "echo $x $Y $(pwd); f 3; sh -c 'echo child $Y'");
  EXPECT_EQ(second.stdout_text, "1 two /tmp\nfn3\nchild two\n");
  EXPECT_TRUE(second.completed);
  // A failure is the error event, as for /command; the state still goes on.
  CommandRun failing = RunIn(s, "x=2; echo oops >&2; exit 4");
  EXPECT_FALSE(failing.completed);
  EXPECT_THAT(failing.error, HasSubstr("4"));
  EXPECT_EQ(failing.stderr_text, "oops\n");
  EXPECT_EQ(RunIn(s, "echo $x").stdout_text, "2\n");

  // Another session starts afresh.
  const std::string other = NewSession();
  EXPECT_EQ(RunIn(other, "echo \"[$x][$Y]\"").stdout_text, "[][]\n");

  EXPECT_EQ(Call("DELETE", "/session/" + s, "", token_).first, 200);
  EXPECT_EQ(RunIn(s, "echo gone").http_status, 404);
  EXPECT_EQ(Call("DELETE", "/session/" + s, "", token_).first, 404);
}

TEST_F(SessionE2eTest, RefusesBadRequests) {
  EXPECT_EQ(Call("POST", "/session", "", "wrong-token").first, 401);
  EXPECT_EQ(Call("POST", "/session", R"({"cwd": "relative"})", token_).first, 400);
  EXPECT_EQ(Call("POST", "/session", "[1]", token_).first, 400);
  EXPECT_EQ(RunIn("session-unknown", "true").http_status, 404);
  const std::string s = NewSession();
  auto [status, body] = Call("POST", "/session/" + s + "/run", "{}", token_);
  EXPECT_EQ(status, 400) << body.dump();
  // Another sandbox's token reaches nothing of this one.
  EXPECT_EQ(agent_->RunAt(id_, "wrong-token", "/session/" + s + "/run", {{"command", "true"}})
                .http_status,
            401);
}

}  // namespace
}  // namespace moat::e2e
