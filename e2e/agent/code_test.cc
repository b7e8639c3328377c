// Code contexts of the per-sandbox API (OpenSandbox's /code, /code/context(s)) on the real
// daemon, over real HTTP: a Python context keeps its variables, imports and functions between
// runs; output, the last expression's value, errors (name, value, traceback) and the execution
// count come as execd's events; the default context; a run is interrupted; contexts are listed
// and deleted, and a deleted context's interpreter (a process inside the sandbox) is gone, as are
// all of them with their sandbox.
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "e2e/agent/agent_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// The events of one run, by type.
struct CodeRun {
  int http_status = 0;
  std::string stdout_text, stderr_text, init;
  std::vector<nlohmann::json> results, errors;
  std::vector<int> counts;
  bool completed = false;
  std::vector<nlohmann::json> events;
};

class CodeE2eTest : public OneSandboxTest {
 protected:
  CodeE2eTest() : OneSandboxTest("/usr/bin/python3") {}

  std::pair<int, nlohmann::json> Call(const std::string& method, const std::string& route,
                                      const std::string& body = "") {
    httplib::Client client("127.0.0.1", agent_->port());
    client.set_read_timeout(60, 0);
    httplib::Headers headers{{"X-EXECD-ACCESS-TOKEN", token_}};
    const std::string path = absl::StrCat("/v1/sandboxes/", id_, "/execd", route);
    httplib::Result res = method == "POST"  ? client.Post(path, headers, body, "application/json")
                          : method == "GET" ? client.Get(path, headers)
                                            : client.Delete(path, headers);
    if (!res) return {0, nullptr};
    return {res->status, nlohmann::json::parse(res->body, nullptr, false)};
  }

  std::string NewContext() {
    auto [status, reply] = Call("POST", "/code/context", R"({"language": "python"})");
    EXPECT_EQ(status, 200) << reply.dump();
    EXPECT_EQ(reply.value("language", ""), "python");
    return reply.is_object() ? reply.value("id", "") : "";
  }

  CodeRun RunCode(const nlohmann::json& body) {
    CommandRun raw = agent_->RunAt(id_, token_, "/code", body);
    CodeRun run;
    run.http_status = raw.http_status;
    run.events = raw.events;
    for (const nlohmann::json& e : raw.events) {
      const std::string type = e.value("type", "");
      EXPECT_TRUE(e.contains("timestamp")) << e.dump();
      if (type == "init") run.init = e.value("text", "");
      if (type == "stdout") run.stdout_text += e.value("text", "");
      if (type == "stderr") run.stderr_text += e.value("text", "");
      if (type == "result") run.results.push_back(e["results"]);
      if (type == "error") run.errors.push_back(e["error"]);
      if (type == "execution_count") run.counts.push_back(e.value("execution_count", -1));
      if (type == "execution_complete") run.completed = true;
    }
    return run;
  }
  CodeRun RunIn(const std::string& context, const std::string& code) {
    return RunCode({{"context", {{"id", context}, {"language", "python"}}}, {"code", code}});
  }
};

TEST_F(CodeE2eTest, AContextKeepsItsStateAndSpeaksExecdsEvents) {
  const std::string ctx = NewContext();
  ASSERT_THAT(ctx, HasSubstr("ctx-"));
  CodeRun first = RunIn(ctx,
                        "import math\n"
                        "x = 41\n"
                        "def inc(a):\n"
                        "    return a + 1\n"
                        "print('hello')\n"
                        "import sys; print('careful', file=sys.stderr)\n"
                        "inc(x)\n");
  EXPECT_EQ(first.http_status, 200);
  EXPECT_EQ(first.init, ctx);
  EXPECT_EQ(first.stdout_text, "hello\n");
  EXPECT_EQ(first.stderr_text, "careful\n");
  ASSERT_THAT(first.results, SizeIs(1));
  EXPECT_EQ(first.results[0].value("text", ""), "42");
  EXPECT_THAT(first.counts, ElementsAre(1));
  EXPECT_THAT(first.errors, IsEmpty());
  EXPECT_TRUE(first.completed);
  ASSERT_FALSE(first.events.empty());
  EXPECT_EQ(first.events.back().value("type", ""), "execution_complete");

  // Variables, imports and functions are still there; what a child process prints comes too.
  CodeRun second = RunIn(ctx,
                         "import os\n"
                         "os.system('echo from-a-child')\n"
                         "print(inc(x) + 1, round(math.pi, 2))\n");
  EXPECT_EQ(second.stdout_text, "from-a-child\n43 3.14\n");
  EXPECT_THAT(second.results, IsEmpty());  // the last statement is no expression
  EXPECT_THAT(second.counts, ElementsAre(2));

  // An exception: its name, value and traceback; the context goes on.
  CodeRun failing = RunIn(ctx, "y = 1\nundefined_name + y\n");
  ASSERT_THAT(failing.errors, SizeIs(1));
  EXPECT_EQ(failing.errors[0].value("ename", ""), "NameError");
  EXPECT_THAT(failing.errors[0].value("evalue", ""), HasSubstr("undefined_name"));
  EXPECT_THAT(failing.errors[0]["traceback"].dump(), HasSubstr("line 2"));
  EXPECT_THAT(failing.counts, ElementsAre(3));
  EXPECT_EQ(RunIn(ctx, "y + x").results.at(0).value("text", ""), "42");
  // A syntax error is an error too.
  EXPECT_EQ(RunIn(ctx, "def (").errors.at(0).value("ename", ""), "SyntaxError");

  // Another context shares nothing with this one.
  const std::string other = NewContext();
  CodeRun fresh = RunIn(other, "print('x' in dir())");
  EXPECT_EQ(fresh.stdout_text, "False\n");
  EXPECT_THAT(fresh.counts, ElementsAre(1));

  // Output is cleaned as command output is: no escape sequences.
  EXPECT_EQ(RunIn(ctx, "print('\\x1b[31mred\\x1b[0m')").stdout_text, "red\n");
}

TEST_F(CodeE2eTest, TheDefaultContextAndStatelessShell) {
  // A language without a context id: the language's default context, made on first use.
  nlohmann::json in_default = {{"context", {{"language", "python"}}}, {"code", "z = 7"}};
  CodeRun first = RunCode(in_default);
  EXPECT_TRUE(first.completed);
  ASSERT_THAT(first.init, HasSubstr("ctx-"));
  in_default["code"] = "z * 6";
  CodeRun second = RunCode(in_default);
  EXPECT_EQ(second.init, first.init);
  EXPECT_EQ(second.results.at(0).value("text", ""), "42");
  // It is listed like any context.
  auto [status, list] = Call("GET", "/code/contexts?language=python");
  EXPECT_EQ(status, 200);
  EXPECT_THAT(list.dump(), HasSubstr(first.init));

  // Neither context nor language: a shell command, as execd runs it.
  CommandRun shell = agent_->RunAt(id_, token_, "/code", {{"code", "echo from-sh; exit 0"}});
  EXPECT_EQ(shell.stdout_text, "from-sh\n");
  EXPECT_TRUE(shell.completed);
}

TEST_F(CodeE2eTest, ARunIsInterruptedAndTheContextGoesOn) {
  const std::string ctx = NewContext();
  ASSERT_TRUE(RunIn(ctx, "kept = 'still here'").completed);
  auto running = std::async(std::launch::async, [&] {
    return RunIn(ctx,
                 "import time\nprint('sleeping', flush=True)\n"
                 "open('/tmp/started', 'w').close()\ntime.sleep(60)\n");
  });
  absl::Time until = absl::Now() + absl::Seconds(30);
  while (Call("GET", "/files/info?path=/tmp/started").first != 200 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  // The code runs, so its client has sent it and handles SIGINT. While it runs, a second run of
  // the same context is refused.
  EXPECT_EQ(RunIn(ctx, "1").http_status, 409);
  EXPECT_EQ(Call("DELETE", "/code?id=" + ctx).first, 200);
  ASSERT_EQ(running.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the interrupt did not end the run";
  CodeRun interrupted = running.get();
  EXPECT_EQ(interrupted.stdout_text, "sleeping\n");
  ASSERT_THAT(interrupted.errors, SizeIs(1));
  EXPECT_EQ(interrupted.errors[0].value("ename", ""), "KeyboardInterrupt");
  // The interpreter and its state survive the interrupt.
  EXPECT_EQ(RunIn(ctx, "print(kept)").stdout_text, "still here\n");
}

TEST_F(CodeE2eTest, ContextsAreListedAndDeletedWithTheirInterpreters) {
  const std::string a = NewContext();
  const std::string b = NewContext();
  // The interpreter runs inside the sandbox: pid 1 of its pid namespace is the sandbox's init.
  CodeRun where = RunIn(a, "import os\nprint(open('/proc/1/comm').read().strip() != 'systemd')");
  EXPECT_EQ(where.stdout_text, "True\n");
  auto [status, list] = Call("GET", "/code/contexts?language=python");
  EXPECT_EQ(status, 200);
  EXPECT_THAT(list, SizeIs(2));
  EXPECT_EQ(Call("GET", "/code/contexts/" + a).second.value("id", ""), a);

  EXPECT_EQ(Call("DELETE", "/code/contexts/" + a).first, 200);
  EXPECT_EQ(Call("GET", "/code/contexts/" + a).first, 404);
  EXPECT_EQ(RunIn(a, "1").http_status, 404);
  EXPECT_EQ(Call("DELETE", "/code/contexts/" + a).first, 404);
  EXPECT_THAT(Call("GET", "/code/contexts?language=python").second, SizeIs(1));
  EXPECT_EQ(Call("DELETE", "/code/contexts?language=python").first, 200);
  EXPECT_THAT(Call("GET", "/code/contexts?language=python").second, IsEmpty());
  EXPECT_EQ(RunIn(b, "1").http_status, 404);

  // Bad requests.
  EXPECT_EQ(Call("POST", "/code/context", R"({"language": "cobol"})").first, 400);
  EXPECT_EQ(Call("POST", "/code/context", R"({"language": "python", "x": 1})").first, 400);
  EXPECT_EQ(Call("POST", "/code", R"({"context": {"language": "python"}})").first, 400);
  EXPECT_EQ(Call("POST", "/code", R"({"code": "1", "context": 3})").first, 400);
  EXPECT_EQ(Call("DELETE", "/code/contexts").first, 400);
  EXPECT_EQ(Call("DELETE", "/code?id=ctx-unknown").first, 404);
}

TEST_F(CodeE2eTest, InterpretersEndWithTheContextAndTheSandbox) {
  // The host sees the interpreters (their command line holds the server's script) and a child
  // their code starts (a marker in its arguments). Only this agent's interpreters are counted:
  // other tests' agents start and end theirs meanwhile under ctest -j.
  const std::string interpreter = "moat-code-ready";
  const std::string marker = absl::StrCat("moat-code-e2e-", ::getpid(), "-", id_);
  const auto interpreters = [&] { return ProcessesWith(interpreter, agent_->pid()); };
  // One process that never forks, the marker its argv[0]: a child that forks (`sh -c`) shows the
  // marker twice between its fork and its child's exec.
  const std::string start_child = absl::StrCat(
      "import subprocess\n"
      "p = subprocess.Popen(['",
      marker, "', '300'], executable='sleep')\n");
  const size_t before = interpreters().size();
  const std::string ctx = NewContext();
  EXPECT_EQ(interpreters().size(), before + 1);
  ASSERT_TRUE(RunIn(ctx, start_child).completed);
  EXPECT_THAT(ProcessesWith(marker), SizeIs(1));
  EXPECT_EQ(Call("DELETE", "/code/contexts/" + ctx).first, 200);
  absl::Time until = absl::Now() + absl::Seconds(10);
  while ((!ProcessesWith(marker).empty() || interpreters().size() > before) &&
         absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(ProcessesWith(marker), IsEmpty()) << "the deleted context's processes live on";
  EXPECT_EQ(interpreters().size(), before) << "the deleted context's interpreter";

  // A context's processes end with their sandbox.
  const std::string other = NewContext();
  ASSERT_TRUE(RunIn(other, start_child).completed);
  EXPECT_THAT(ProcessesWith(marker), SizeIs(1));
  EXPECT_EQ(interpreters().size(), before + 1);
  EXPECT_EQ(agent_->Node("DELETE", "/v1/sandboxes/" + id_).first, 200);
  until = absl::Now() + absl::Seconds(10);
  while ((!ProcessesWith(marker).empty() || interpreters().size() > before) &&
         absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(ProcessesWith(marker), IsEmpty()) << "the sandbox's code lives on";
  EXPECT_EQ(interpreters().size(), before) << "the sandbox's interpreter lives on";
}

}  // namespace
}  // namespace moat::e2e
