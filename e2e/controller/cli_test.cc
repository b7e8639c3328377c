// The moat CLI against a real moat-controller and agent on loopback: `moat run --server` keeps
// moat run's contract (output, exit statuses, --json), and `moat sandbox ...` / `moat node ...`
// do what they say.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "e2e/controller/fleet.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

struct Ran {
  int status = -1;  // The exit status.
  std::string out, err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "agents make real sandboxes: run as root";
    auto fleet = Fleet::Create();
    ASSERT_TRUE(fleet.ok()) << fleet.status();
    fleet_ = *std::move(fleet);
    ASSERT_TRUE(fleet_->StartController().ok());
    ASSERT_TRUE(fleet_->StartAgent({.name = "a1"}).ok());
    server_ = absl::StrCat("http://127.0.0.1:", fleet_->controller().port());
  }

  // The moat binary with `args`, MOAT_SERVER and MOAT_API_KEY set unless `bare`.
  Ran Moat(std::vector<std::string> args, bool bare = false) {
    const std::string out = fleet_->dir() + "/cli.out", err = fleet_->dir() + "/cli.err";
    pid_t pid = fork();
    if (pid == 0) {
      int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(o, 1);
      dup2(e, 2);
      if (bare) {
        unsetenv("MOAT_SERVER");
        unsetenv("MOAT_API_KEY");
      } else {
        setenv("MOAT_SERVER", server_.c_str(), 1);
        setenv("MOAT_API_KEY", fleet_->api_key().c_str(), 1);
      }
      std::string bin = Fleet::MoatBinary();
      std::vector<char*> argv = {bin.data()};
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    return {WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus), ReadFile(out),
            ReadFile(err)};
  }

  std::unique_ptr<Fleet> fleet_;
  std::string server_;
};

TEST_F(CliE2eTest, RunWithServerKeepsTheLocalContract) {
  Ran r = Moat({"run", "--server", server_, "--", "sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.out, "out\n");
  EXPECT_THAT(r.err, HasSubstr("err\n"));
  r = Moat({"run", "--server", server_, "--json", "--", "sh", "-c", "echo 'it''s'; exit 3"});
  ASSERT_EQ(r.status, 0) << r.err;
  json result = json::parse(r.out);
  EXPECT_EQ(result["status"], "exited");
  EXPECT_EQ(result["exit_code"], 3);
  EXPECT_EQ(result["stdout"], "its\n");
  // The same object as a local moat run --json (sandbox/output/result.h), key for key.
  Ran local = Moat({"run", "--json", "--", "true"}, /*bare=*/true);
  ASSERT_EQ(local.status, 0) << local.err;
  json local_result = json::parse(local.out);
  for (const auto& [k, v] : local_result.items()) EXPECT_TRUE(result.contains(k)) << k;
  for (const auto& [k, v] : result.items()) {
    EXPECT_TRUE(local_result.contains(k) || k == "notes") << k;
  }
  r = Moat({"run", "--server", server_, "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(r.status, 137) << r.err;
  r = Moat({"run", "--server", server_, "--wall-timeout", "1s", "--", "sleep", "30"});
  EXPECT_EQ(r.status, 124) << r.err;
  r = Moat({"run", "--server", server_, "--env", "GREETING=hi there", "--", "sh", "-c",
            "echo \"$GREETING\""});
  EXPECT_EQ(r.out, "hi there\n");
  // Could not run: no controller there, a wrong key, a flag the fleet does not take.
  r = Moat({"run", "--server", "http://127.0.0.1:1", "--", "true"});
  EXPECT_EQ(r.status, 125);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the controller"));
  r = Moat({"run", "--server", server_, "--api-key", "wrong-key-0123456789", "--", "true"}, true);
  EXPECT_EQ(r.status, 125);
  EXPECT_THAT(r.err, HasSubstr("401"));
  r = Moat({"run", "--server", server_, "--policy", "/etc/passwd", "--", "true"});
  EXPECT_EQ(r.status, 125);
  r = Moat({"run", "--server", "https://127.0.0.1:8443", "--", "true"});
  EXPECT_EQ(r.status, 125);
  EXPECT_THAT(r.err, HasSubstr("plain http://"));
  EXPECT_TRUE(fleet_->Call("GET", "/v1/sandboxes").second["items"].empty());
}

TEST_F(CliE2eTest, SandboxAndNodeCommands) {
  Ran created = Moat({"sandbox", "create", "--image", "python:3.11", "--timeout", "600"});
  ASSERT_EQ(created.status, 0) << created.err;
  std::string id = created.out.substr(0, created.out.find('\n'));
  ASSERT_EQ(id.size(), 36u) << created.out;
  Ran ls = Moat({"sandbox", "ls"});
  EXPECT_THAT(ls.out, HasSubstr(id));
  EXPECT_THAT(ls.out, HasSubstr("Running"));
  Ran got = Moat({"sandbox", "get", id});
  EXPECT_EQ(json::parse(got.out)["id"], id);
  Ran exec = Moat({"sandbox", "exec", id, "--", "sh", "-c", "echo hello; echo oops >&2; exit 4"});
  EXPECT_EQ(exec.status, 4) << exec.err;
  EXPECT_EQ(exec.out, "hello\n");
  EXPECT_THAT(exec.err, HasSubstr("oops"));
  // cp in and out, byte for byte.
  std::string local = fleet_->dir() + "/in.bin", back = fleet_->dir() + "/back.bin";
  std::string content = "line one\nbytes \x01\x02\xff\n";
  std::ofstream(local, std::ios::binary) << content;
  Ran in = Moat({"sandbox", "cp", local, id + ":/workspace/in.bin"});
  ASSERT_EQ(in.status, 0) << in.err;
  EXPECT_EQ(Moat({"sandbox", "exec", id, "--", "wc", "-c", "/workspace/in.bin"}).out,
            absl::StrCat(content.size(), " /workspace/in.bin\n"));
  Ran out = Moat({"sandbox", "cp", id + ":/workspace/in.bin", back});
  ASSERT_EQ(out.status, 0) << out.err;
  EXPECT_EQ(ReadFile(back), content);
  EXPECT_NE(Moat({"sandbox", "cp", id + ":/workspace/missing", back}).status, 0);

  Ran nodes = Moat({"node", "ls"});
  EXPECT_THAT(nodes.out, HasSubstr("a1"));
  EXPECT_THAT(nodes.out, HasSubstr("Ready"));
  EXPECT_EQ(Moat({"node", "cordon", "a1"}).status, 0);
  EXPECT_THAT(Moat({"node", "ls"}).out, HasSubstr("cordoned"));
  Ran drained = Moat({"node", "drain", "a1"});
  EXPECT_EQ(drained.status, 0) << drained.err;
  EXPECT_THAT(drained.out, HasSubstr("1 sandbox(es) ended"));
  EXPECT_EQ(json::parse(Moat({"sandbox", "get", id}).out)["status"]["reason"], "NODE_DRAINED");
  EXPECT_EQ(Moat({"sandbox", "rm", id}).status, 0);
  Ran gone = Moat({"sandbox", "get", id});
  EXPECT_EQ(gone.status, 125);
  EXPECT_THAT(gone.err, HasSubstr("404"));
  EXPECT_EQ(Moat({"node", "cordon", "nope"}).status, 125);
  EXPECT_EQ(Moat({"sandbox", "ls"}, /*bare=*/true).status, 125);  // No server given.
}

}  // namespace
}  // namespace moat::e2e
