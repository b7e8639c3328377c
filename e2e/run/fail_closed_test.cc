// Failing closed: when the sandbox cannot be set up as asked, moat exits 125 with a message that
// names the step, and the command does not run at all (it would print a marker and create a file
// in a writable workspace).
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;

class FailClosedTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ws_ = dir().Path("ws");
    MakeDirs(ws_);
    ASSERT_EQ(::chown(ws_.c_str(), 65534, 65534), 0);
  }

  // Runs `moat run <flags> -- <marker command>` and checks that it failed closed with a message
  // containing `message_part`.
  void ExpectRefused(std::vector<std::string> flags, absl::string_view message_part,
                     const MoatOptions& options = {}, bool with_workspace = true) {
    if (with_workspace) {
      flags.push_back("--workspace");
      flags.push_back(ws_);
    }
    const std::string marker = UniqueMarker("moat-e2e-ran");
    std::vector<std::string> command = {"/bin/sh", "-c",
                                        absl::StrCat("echo ", marker, "; touch /workspace/ran")};
    for (bool json : {false, true}) {
      std::vector<std::string> args = {"run"};
      if (json) args.push_back("--json");
      args.insert(args.end(), flags.begin(), flags.end());
      args.push_back("--");
      args.insert(args.end(), command.begin(), command.end());
      MoatResult r = RunMoat(args, options);
      SCOPED_TRACE(absl::StrCat(json ? "--json " : "", "flags: ", testing::PrintToString(flags)));
      EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
      EXPECT_THAT(r.err, HasSubstr("moat run: ")) << r.err;
      EXPECT_THAT(r.err, HasSubstr(message_part)) << r.err;
      EXPECT_THAT(r.out + r.err, testing::Not(HasSubstr(marker))) << "the command ran";
      EXPECT_FALSE(PathExists(ws_ + "/ran")) << "the command ran";
      EXPECT_LT(r.seconds, Scaled(10));
      EXPECT_TRUE(CgroupDirsOf(r.pid).empty());
    }
  }

  std::string Policy(absl::string_view name, absl::string_view yaml) {
    std::string path = dir().Path(name);
    WriteFile(path, yaml, 0644);
    return path;
  }

  std::string ws_;
};

TEST_F(FailClosedTest, ControlTheMarkerCommandRunsWhenAllowed) {
  MoatResult r = RunPlain({"--workspace", ws_}, Sh("echo ran; touch /workspace/ran"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(PathExists(ws_ + "/ran"));
}

TEST_F(FailClosedTest, ImpossibleLimits) {
  // Messages name the flag.
  ExpectRefused({"--memory", "0"}, "--memory");
  ExpectRefused({"--memory", "12Q"}, "--memory");
  ExpectRefused({"--memory", "-1G"}, "--memory");
  ExpectRefused({"--pids", "0"}, "--pids");
  ExpectRefused({"--pids", "-3"}, "--pids");
  ExpectRefused({"--cpus", "0"}, "--cpus");
  ExpectRefused({"--cpus", "nan"}, "--cpus");
  ExpectRefused({"--cpu-timeout", "0s"}, "--cpu-timeout");
  ExpectRefused({"--wall-timeout", "forever"}, "--wall-timeout");
  ExpectRefused({"--tmpfs-size", "0"}, "--tmpfs-size");
}

TEST_F(FailClosedTest, BadOptions) {
  ExpectRefused({"--privileged"}, "unknown option");
  ExpectRefused({"--env", "NOEQUALS"}, "--env");
  ExpectRefused({"--env", "1BAD=x"}, "1BAD");
}

TEST_F(FailClosedTest, BadPolicyFiles) {
  ExpectRefused({"--policy", dir().Path("missing.yaml")}, "missing.yaml");
  ExpectRefused({"--policy", Policy("unknown.yaml", "filesystem:\n  allowEverything: true\n")},
                "allowEverything");
  ExpectRefused({"--policy", Policy("typo.yaml", "limts:\n  memory: 1G\n")}, "limts");
  ExpectRefused({"--policy", Policy("broken.yaml", "filesystem: [unclosed\n")}, "broken.yaml");
  ExpectRefused({"--policy", Policy("json.json", "{\"limits\": {\"memory\": \"lots\"}}")},
                "memory");
  // Egress that cannot be set up: the command must not run, with or without network.
  ExpectRefused({"--audit-log", dir().Path("no-such-dir/audit.jsonl"), "--policy",
                 Policy("domain.yaml", "network:\n  allowedDomains: [example.com]\n")},
                "audit log");
  ExpectRefused({"--policy", Policy("star.yaml", "network:\n  allowedDomains: ['*']\n")},
                "allowedDomains");
  ExpectRefused({"--policy", Policy("cidr.yaml", "network:\n  allowedCidrs: [10.0.0.1/8]\n")},
                "allowedCidrs");
  // sandbox-runtime settings that would widen the sandbox.
  ExpectRefused({"--policy",
                 Policy("sockets.yaml", "network:\n  allowUnixSockets: [/var/run/docker.sock]\n")},
                "allowUnixSockets");
  ExpectRefused({"--policy", Policy("allwrite.yaml",
                                    "filesystem:\n  allowWrite: [/nonexistent-"
                                    "moat-e2e]\n")},
                "nonexistent-moat-e2e");
}

// A repository's own policy (.moat/policy.yaml in the working directory) may only tighten; a
// sandboxed run that wrote one into its workspace must not widen the next run.
TEST_F(FailClosedTest, ProjectPolicyCannotWiden) {
  MakeDirs(dir().Path("project/.moat"));
  MoatOptions options;
  options.cwd = dir().Path("project");
  for (const char* yaml :
       {"filesystem:\n  allowWrite: [/etc]\n", "filesystem:\n  hideHome: false\n",
        "limits:\n  memory: 64G\n", "limits:\n  wallTimeout: 24h\n",
        "network:\n  allowedDomains: ['*.example.com']\n"}) {
    SCOPED_TRACE(yaml);
    WriteFile(dir().Path("project/.moat/policy.yaml"), yaml, 0644);
    ExpectRefused({}, "policy", options);
  }
}

TEST_F(FailClosedTest, BadWorkspaces) {
  ExpectRefused({"--workspace", dir().Path("missing")}, "--workspace", {}, false);
  WriteFile(dir().Path("a-file"), "x", 0644);
  ExpectRefused({"--workspace", dir().Path("a-file")}, "--workspace", {}, false);
}

// No cgroup hierarchy at all (moat runs in a mount namespace where /sys/fs/cgroup is an empty
// tmpfs): moat must refuse rather than run without limits.
TEST_F(FailClosedTest, MissingCgroupHierarchy) {
  MoatOptions options;
  options.before_exec = [] {
    return ::unshare(CLONE_NEWNS) == 0 &&
           ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
           ::mount("none", "/sys/fs/cgroup", "tmpfs", 0, "size=4k") == 0;
  };
  ExpectRefused({}, "cgroup", options);
}

// An ordinary user where no cgroup is delegated to it (the dev machine: cgroup v1; the VM lane:
// no user manager for nobody): refused before any step, naming the step and the fix.
TEST_F(FailClosedTest, OrdinaryUserWithoutADelegatedCgroup) {
  MoatOptions options;
  options.binary = Attack("moat");  // nobody may not enter the checkout's directories
  options.before_exec = [] {
    return ::setgroups(0, nullptr) == 0 && ::setresgid(65534, 65534, 65534) == 0 &&
           ::setresuid(65534, 65534, 65534) == 0;
  };
  ExpectRefused({}, "rootless cgroup: moat runs as uid 65534 (not root)", options);
  ExpectRefused({}, "or run moat as root", options);
}

// moat is visible (read-only) inside (a copy in the scratch directory, which the sandbox sees
// wherever the checkout is): a nested `moat run` must fail rather than make a sandbox with the
// outer one's powers, or hang.
TEST_F(FailClosedTest, MoatInsideTheSandboxCannotStartAnotherSandbox) {
  MoatResult raw;
  nlohmann::json r =
      RunJson({"--wall-timeout", "20s"},
              {Attack("moat"), "run", "--", "/bin/sh", "-c", "echo NESTED-RAN"}, {}, &raw);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["status"], "exited") << Describe(r);
  EXPECT_EQ(r["exit_code"], 125) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), testing::Not(HasSubstr("NESTED-RAN"))) << Describe(r);
  EXPECT_LT(raw.seconds, Scaled(15));
}

}  // namespace
}  // namespace moat::e2e
