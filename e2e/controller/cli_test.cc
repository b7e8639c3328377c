// The moat CLI against a real moat-controller and agent on loopback: `moat run --server` keeps
// moat run's contract (output, exit statuses, --json), and `moat sandbox ...` / `moat node ...`
// do what they say.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "e2e/controller/fleet.h"
#include "e2e/time_scale.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/testing/test_ca.h"

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

// The moat binary with `args` (output in `dir`); MOAT_SERVER and MOAT_API_KEY set when given,
// `env` added.
Ran RunMoat(const std::string& dir, std::vector<std::string> args, const std::string& server,
            const std::string& key, const std::map<std::string, std::string>& env = {}) {
  const std::string out = dir + "/cli.out", err = dir + "/cli.err";
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    unsetenv("MOAT_SERVER");
    unsetenv("MOAT_API_KEY");
    unsetenv("MOAT_CA_FILE");
    if (!server.empty()) setenv("MOAT_SERVER", server.c_str(), 1);
    if (!key.empty()) setenv("MOAT_API_KEY", key.c_str(), 1);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
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

class CliE2eTest : public FleetTest {
 protected:
  void StartFleet() override {
    // A shell profile with a short CPU limit, so a CPU timeout can be compared with moat run's.
    // Scaled (e2e/time_scale.h): under emulation starting python3 alone costs seconds of CPU.
    fleet_->set_extra_config(absl::StrCat("languages: {shell: {wall: 60s, cpu: ", Scaled(2),
                                          "s}, python: {wall: 60s, cpu: ", Scaled(15), "s}}\n"));
    ASSERT_TRUE(fleet_->StartController().ok());
    ASSERT_TRUE(fleet_->StartAgent({.name = "a1"}).ok());
    server_ = absl::StrCat("http://127.0.0.1:", fleet_->controller().port());
  }

  // The moat binary with `args`, MOAT_SERVER and MOAT_API_KEY set unless `bare`.
  Ran Moat(std::vector<std::string> args, bool bare = false) {
    return RunMoat(fleet_->dir(), std::move(args), bare ? "" : server_,
                   bare ? "" : fleet_->api_key());
  }

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
  r = Moat({"run", "--server", "https://127.0.0.1:1", "--", "true"});
  EXPECT_EQ(r.status, 125);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the controller"));
  EXPECT_TRUE(fleet_->Call("GET", "/v1/sandboxes").second["items"].empty());
}

// Every field of `moat run --json`, locally and through the controller (POST /v1/run), for the
// ways a run ends: any difference in status, exit code, signal, output (byte for byte, a last
// line without its newline included, the first 1 MiB of a longer stream), truncation,
// violations (a forbidden system call, a denied egress request) fails; CPU time and peak
// memory are measured, so they are compared as ranges both must fall in.
TEST_F(CliE2eTest, RunWithServerMatchesALocalRunFieldByField) {
  struct Case {
    std::string name;
    std::vector<std::string> local_flags, server_flags, command;
    double min_cpu = 0, max_cpu = 1e9;
    uint64_t min_peak = 0;
    // Set: the run has egress (locally `--policy` with these domains allowed; through the
    // controller POST /v1/run's networkPolicy, which `moat run --server` does not take).
    std::vector<std::string> allowed_domains = {};
    bool violates = false;  // the run must list at least one violation
  };
  // Egress on loopback only: the proxy refuses an address no rule allows before dialling.
  const std::string policy = fleet_->dir() + "/egress-policy.yaml";
  std::ofstream(policy) << "network:\n  allowedDomains: [\"allowed.invalid\"]\n";
  const std::string spin =
      "import time\nt = time.process_time()\n"
      "while time.process_time() - t < 0.4: pass\n"
      "b = bytearray(48 << 20)\nb[::4096] = b'x' * len(b[::4096])\n";
  const std::string wall = absl::StrCat(static_cast<int>(Scaled(1)), "s");
  const std::vector<Case> cases = {
      {"exit code, both streams, a partial last line",
       {},
       {},
       {"sh", "-c", "printf 'a\\nb'; echo err >&2; exit 3"}},
      {"cpu and memory", {}, {}, {"python3", "-c", spin}, 0.4, Scaled(5), uint64_t{48} << 20},
      {"signal", {}, {}, {"sh", "-c", "kill -9 $$"}},
      // Scaled: through the controller the CPU budget is the profile's scaled by the wall
      // timeout (1/60 of it here), less than starting `sleep` costs under emulation unscaled.
      {"wall timeout", {"--wall-timeout", wall}, {"--wall-timeout", wall}, {"sleep", "30"}},
      // The controller's shell profile: 2 s of CPU, scaled (SetUp); moat run's flag says the same.
      {"cpu timeout",
       {"--cpu-timeout", absl::StrCat(Scaled(2), "s")},
       {},
       {"sh", "-c", "while :; do :; done"},
       Scaled(2),
       Scaled(10)},
      {"oom kill",
       {"--memory", "64M"},
       {"--memory", "64M"},
       {"python3", "-c", "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])"}},
      {"truncation", {}, {}, {"sh", "-c", "yes | head -c 1500000; yes e | head -c 10 >&2"}},
      {"truncation of both streams",
       {},
       {},
       {"sh", "-c", "yes abc | head -c 1200000; yes def | head -c 1100000 >&2; echo end"}},
      // unshare(CLONE_NEWUSER) is refused by the seccomp filter: "seccomp" violations.
      {"forbidden system call", {}, {}, {"unshare", "-U", "true"}, 0, 1e9, 0, {}, true},
      {"denied egress",
       {"--policy", policy},
       {},
       {"curl", "-sS", "--noproxy", "", "-o", "/dev/null", "-w", "%{http_code}\n", "-x",
        "http://127.0.0.1:3128", "http://127.0.0.1:9/"},
       0,
       1e9,
       0,
       {"allowed.invalid"},
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> local_args = {"run", "--json"};
    local_args.insert(local_args.end(), c.local_flags.begin(), c.local_flags.end());
    local_args.push_back("--");
    local_args.insert(local_args.end(), c.command.begin(), c.command.end());
    std::vector<std::string> server_args = {"run", "--server", server_, "--json"};
    server_args.insert(server_args.end(), c.server_flags.begin(), c.server_flags.end());
    server_args.push_back("--");
    server_args.insert(server_args.end(), c.command.begin(), c.command.end());
    Ran local = Moat(local_args, /*bare=*/true);
    ASSERT_EQ(local.status, 0) << local.err;
    json l = json::parse(local.out), r;
    if (c.allowed_domains.empty()) {
      Ran remote = Moat(server_args);
      ASSERT_EQ(remote.status, 0) << remote.err;
      r = json::parse(remote.out);
    } else {
      json egress = json::array();
      for (const std::string& d : c.allowed_domains) {
        egress.push_back({{"action", "allow"}, {"target", d}});
      }
      auto [status, body] =
          fleet_->Call("POST", "/v1/run",
                       json{{"command", c.command},
                            {"networkPolicy", {{"defaultAction", "deny"}, {"egress", egress}}}}
                           .dump());
      ASSERT_EQ(status, 200) << body.dump();
      r = body;
    }
    if (c.violates) EXPECT_FALSE(l["violations"].empty()) << l.dump();
    for (const auto& [k, v] : l.items()) EXPECT_TRUE(r.contains(k)) << k;
    for (const auto& [k, v] : r.items()) EXPECT_TRUE(l.contains(k)) << k << " " << r.dump();
    for (const char* k : {"status", "exit_code", "signal", "stdout", "stderr", "stdout_truncated",
                          "stderr_truncated", "violations"}) {
      EXPECT_EQ(l[k], r[k]) << k;
    }
    for (const json* j : {&l, &r}) {
      EXPECT_GT((*j)["wall_seconds"].get<double>(), 0);
      EXPECT_GE((*j)["cpu_seconds"].get<double>(), c.min_cpu) << j->dump().substr(0, 400);
      EXPECT_LE((*j)["cpu_seconds"].get<double>(), c.max_cpu);
      // Not "> 0" for every case: a command that only kills itself may charge nothing past a
      // reused cgroup's baseline (the kernel charges memory in per-CPU batches of 64 pages);
      // the memory case's floor shows both sides measure it.
      EXPECT_GE((*j)["peak_memory_bytes"].get<uint64_t>(), c.min_peak)
          << (j == &l ? "local: " : "server: ") << j->dump().substr(0, 400);
    }
    // And without --json: the same exit status and output.
    local_args.erase(local_args.begin() + 1);
    server_args.erase(server_args.begin() + 3);
    // moat run without --json streams all of it; networkPolicy has no flag.
    if (absl::StartsWith(c.name, "truncation") || !c.allowed_domains.empty()) continue;
    Ran local_plain = Moat(local_args, /*bare=*/true);
    Ran remote_plain = Moat(server_args);
    EXPECT_EQ(local_plain.status, remote_plain.status) << remote_plain.err;
    EXPECT_EQ(local_plain.out, remote_plain.out);
    // Both print each violation on stderr the same way.
    for (const json& v : l["violations"]) {
      const std::string line = absl::StrCat("moat: violation (", v["kind"].get<std::string>(),
                                            "): ", v["detail"].get<std::string>(), "\n");
      EXPECT_THAT(local_plain.err, HasSubstr(line));
      EXPECT_THAT(remote_plain.err, HasSubstr(line));
    }
  }
  EXPECT_TRUE(fleet_->Call("GET", "/v1/sandboxes").second["items"].empty());
}

// https:// with the certificate verified, against a private CA made here, for a host name.
TEST(CliTlsE2eTest, HttpsWithAPrivateCaAndAHostName) {
  if (geteuid() != 0) GTEST_SKIP() << "the fleet's directories are root's";
  auto made = Fleet::Create();
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<Fleet> fleet = *std::move(made);
  const std::string d = fleet->dir();
  // A CA, and a server certificate it signs for the name "localhost" only.
  absl::StatusOr<moat::testing::TestCa> made_ca = moat::testing::MakeTestCa(d, {"DNS:localhost"});
  ASSERT_TRUE(made_ca.ok()) << made_ca.status();
  fleet->set_extra_config(
      absl::StrCat("tls: {cert: ", made_ca->server_pem, ", key: ", made_ca->server_key, "}\n"));
  ASSERT_TRUE(fleet->StartController().ok()) << fleet->controller().Log();
  const int port = fleet->controller().port();
  const std::string by_name = absl::StrCat("https://localhost:", port);
  const std::string ca = made_ca->ca_pem;
  // Verified against the CA, for the name the URL gives (resolved through /etc/hosts).
  Ran ls = RunMoat(d, {"node", "ls", "--json", "--ca-file", ca}, by_name, fleet->api_key());
  EXPECT_EQ(ls.status, 0) << ls.err;
  EXPECT_EQ(json::parse(ls.out, nullptr, false), json::array()) << ls.out;
  Ran sandboxes =
      RunMoat(d, {"sandbox", "ls", "--json"}, by_name, fleet->api_key(), {{"MOAT_CA_FILE", ca}});
  EXPECT_EQ(sandboxes.status, 0) << sandboxes.err;
  // moat run reaches it: no node has joined, which the controller itself says (429).
  Ran run =
      RunMoat(d, {"run", "--server", by_name, "--ca-file", ca, "--", "true"}, "", fleet->api_key());
  EXPECT_EQ(run.status, 125);
  EXPECT_THAT(run.err, HasSubstr("no node has joined"));
  Ran tenants = RunMoat(
      d,
      {"tenant", "ls", "--server", by_name, "--ca-file", ca, "--admin-key-file", d + "/admin.key"},
      "", "");
  EXPECT_EQ(tenants.status, 0) << tenants.err;
  // Not trusted without the CA (the system's store does not have it).
  Ran untrusted = RunMoat(d, {"node", "ls"}, by_name, fleet->api_key());
  EXPECT_EQ(untrusted.status, 125);
  EXPECT_THAT(untrusted.err, HasSubstr("is not trusted"));
  EXPECT_THAT(untrusted.err, HasSubstr("--ca-file"));
  // A CA that did not sign it: refused too.
  Ran wrong_ca =
      RunMoat(d, {"node", "ls", "--ca-file", made_ca->other_pem}, by_name, fleet->api_key());
  EXPECT_EQ(wrong_ca.status, 125);
  EXPECT_THAT(wrong_ca.err, HasSubstr("is not trusted"));
  // The certificate names localhost, not 127.0.0.1: the address does not match it.
  Ran by_ip = RunMoat(d, {"node", "ls", "--ca-file", ca}, absl::StrCat("https://127.0.0.1:", port),
                      fleet->api_key());
  EXPECT_EQ(by_ip.status, 125);
  EXPECT_THAT(by_ip.err, HasSubstr("is not trusted"));
  // Plain http:// to the TLS port gets no answer it can read.
  EXPECT_EQ(
      RunMoat(d, {"node", "ls"}, absl::StrCat("http://localhost:", port), fleet->api_key()).status,
      125);
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
