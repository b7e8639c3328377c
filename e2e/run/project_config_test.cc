// The project's agent and tool configuration under a writable project (filesystem.allowWrite
// with the project as the working directory, as Pi's sandbox.json example has it): a sandboxed
// command must not be able to write or create what the host later runs (.pi/extensions,
// .git/hooks, .envrc, ...). Paths that exist are read-only; paths that do not exist are refused
// when the sandbox tries to create them, so nothing is left behind whatever kills moat.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Every path of the issue that reported the escape, as files the sandbox tries to write. The
// first component is what must never appear.
const std::vector<std::string>& ProtectedFiles() {
  static const std::vector<std::string> files = {".pi/extensions/evil.ts",
                                                 ".pi/settings.json",
                                                 ".pi/SYSTEM.md",
                                                 ".pi/mcp.json",
                                                 ".pi/sandbox.json",
                                                 ".moat/policy.yaml",
                                                 ".agents/evil.md",
                                                 ".claude/settings.json",
                                                 ".mcp.json",
                                                 ".vscode/tasks.json",
                                                 ".idea/workspace.xml",
                                                 ".envrc",
                                                 ".git/hooks/pre-commit",
                                                 ".git/config"};
  return files;
}

// Tries to make `file` (and its directories) and says, from inside, whether anything of it
// exists afterwards.
std::string TryToPlant(const std::string& file) {
  const std::string first = file.substr(0, file.find('/'));
  const std::string target = first == ".git" ? file : first;
  return absl::StrCat("mkdir -p \"$(dirname '", file, "')\" 2>/dev/null; echo evil > '", file,
                      "' 2>/dev/null; if [ -e '", target, "' ]; then echo 'PRESENT ", target,
                      "'; fi\n");
}

class ProjectConfigTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    project_ = dir().Path("project");
    // A repository without hooks or config, the case the cleanup-after-the-run approach missed.
    MakeDirs(project_ + "/.git/objects");
    WriteFile(project_ + "/.git/HEAD", "ref: refs/heads/main\n", 0644);
    for (const std::string& p :
         {project_, project_ + "/.git", project_ + "/.git/objects", project_ + "/.git/HEAD"}) {
      EXPECT_EQ(::chown(p.c_str(), SandboxHostUid(), SandboxHostGid()), 0) << p;
    }
    policy_ = dir().Path("policy.yaml");
    WriteFile(policy_, absl::StrCat("filesystem:\n  allowWrite: [\"", project_, "\"]\n"), 0644);
    options_.cwd = project_;
  }

  // The sandbox starts in /workspace; the project is at its own path.
  std::string Cd() const { return absl::StrCat("cd '", project_, "' || exit 99\n"); }

  // Nothing of `file` exists on the host.
  void ExpectAbsent(const std::string& file) {
    const std::string first = file.substr(0, file.find('/'));
    const std::string host =
        first == ".git" ? absl::StrCat(project_, "/", file) : absl::StrCat(project_, "/", first);
    EXPECT_FALSE(PathExists(host)) << "ATTACK SUCCEEDED: \"" << host << "\" exists on the host";
  }

  std::string project_, policy_;
  MoatOptions options_;
};

TEST_F(ProjectConfigTest, EveryProtectedPathIsRefusedWhenCreated) {
  std::string script = Cd();
  for (const std::string& f : ProtectedFiles()) script += TryToPlant(f);
  script += "echo work > main.py && mkdir -p src && echo more > src/lib.py && echo 'work landed'\n";
  nlohmann::json r = RunJson({"--policy", policy_}, Sh(script), options_);
  ASSERT_TRUE(r.is_object());
  const std::string out = r["stdout"].get<std::string>();
  EXPECT_THAT(out, Not(HasSubstr("PRESENT"))) << "created inside the sandbox: " << Describe(r);
  EXPECT_THAT(out, HasSubstr("work landed")) << Describe(r);
  for (const std::string& f : ProtectedFiles()) ExpectAbsent(f);
  EXPECT_EQ(ReadFile(project_ + "/main.py"), "work\n");
  EXPECT_EQ(ReadFile(project_ + "/src/lib.py"), "more\n");
  for (const char* name : {".pi", ".envrc", ".git/hooks", ".git/config", ".vscode"}) {
    EXPECT_TRUE(HasViolation(r, "filesystem", absl::StrCat(project_, "/", name)))
        << name << " was not reported: " << Describe(r);
  }
}

// A SIGKILL of moat (how Pi aborts a tool call) ends supervision at once: only a refusal at the
// moment of creation leaves nothing behind.
TEST_F(ProjectConfigTest, NothingIsLeftWhenMoatIsKilled) {
  const std::string ready = project_ + "/ready";
  std::string script = Cd();
  for (const std::string& f : ProtectedFiles()) script += TryToPlant(f);
  script += "echo > ready; sleep 30\n";
  MoatProcess moat({"run", "--policy", policy_, "--", "/bin/sh", "-c", script}, options_);
  ASSERT_TRUE(Eventually([&] { return PathExists(ready); }, 10))
      << "the sandboxed script never got to the end of its attempts";
  ASSERT_EQ(::kill(moat.pid(), SIGKILL), 0);
  MoatResult r = moat.Wait();
  EXPECT_EQ(r.term_signal, SIGKILL);
  for (const std::string& f : ProtectedFiles()) ExpectAbsent(f);
}

// The same names reached another way: through a symlink the sandbox made, by renaming or
// hard-linking something else onto them, by moving their parent away and back, and through
// Python's own open().
TEST_F(ProjectConfigTest, WaysAroundTheNameAreRefused) {
  const std::string script =
      Cd() +
      "ln -s .envrc via-link 2>/dev/null; echo evil > via-link 2>/dev/null\n"
      "mkdir staged && echo evil > staged/x.ts && mv staged .pi 2>/dev/null\n"
      "echo evil > plain && ln plain .mcp.json 2>/dev/null\n"
      "mv .git g && { mkdir g/hooks; echo evil > g/config; mv g .git; } 2>/dev/null\n"
      "python3 -c \"open('.claude', 'w')\" 2>/dev/null\n"
      "python3 -c \"import os; os.open('.vscode', os.O_CREAT | os.O_EXCL | os.O_WRONLY)\" "
      "2>/dev/null\n"
      "for f in .envrc .pi .mcp.json g/hooks g/config .claude .vscode; do "
      "[ -e \"$f\" ] && echo \"PRESENT $f\"; done; echo done\n";
  nlohmann::json r = RunJson({"--policy", policy_}, Sh(script), options_);
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("PRESENT"))) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("done")) << Describe(r);
  for (const char* f : {".envrc", ".pi", ".mcp.json", ".claude", ".vscode"}) ExpectAbsent(f);
  // The repository moved away keeps its identity: its hooks and config are still protected
  // (and moving it back is creating ".git", refused too).
  for (const char* f : {"/g/hooks", "/g/config"}) {
    EXPECT_FALSE(PathExists(project_ + f)) << "ATTACK SUCCEEDED: " << project_ << f;
  }
  EXPECT_TRUE(PathExists(project_ + "/g/HEAD")) << Describe(r);
}

// Another thread rewrites the path while the creating call waits for the guard: the guard acts
// on the copy it checked, so the protected name never appears.
TEST_F(ProjectConfigTest, RewritingThePathDuringTheCheckGetsNowhere) {
  // The flipping thread spins for the whole run: under emulation 3000 guarded calls took
  // longer than the default 30 s of CPU, and as an ordinary user (the real-kernel lane's
  // rootless checks) more than the harness's 120 s, so there the race is tried fewer times
  // (750 at the lane's scale of 4) and the limits are scaled; on real hardware 3000 times.
  const int attempts = static_cast<int>(3000 / HangScale());
  nlohmann::json r = RunJson(
      {"--policy", policy_, "--cpu-timeout", absl::StrCat(Scaled(30), "s"), "--wall-timeout",
       absl::StrCat(Scaled(60), "s")},
      Sh(absl::StrCat(Cd(), "exec ", Attack("create_race"), " .envrc ", attempts)), options_);
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("held race")) << Describe(r);
  ExpectAbsent(".envrc");
}

// Pi's configuration as a Pi user has it: the global file (a trusted --user-policy layer) makes
// the project writable and denies writing keys and env files by glob; the project's own
// .pi/sandbox.json repeats allowWrite ["."], which is no widening above the global file.
TEST_F(ProjectConfigTest, PisDefaultConfigurationIsAcceptedAndEnforced) {
  MakeDirs(project_ + "/.pi");
  WriteFile(project_ + "/.pi/sandbox.json", R"({"filesystem": {"allowWrite": ["."]}})");
  MakeDirs(project_ + "/certs");
  WriteFile(project_ + "/certs/server.pem", "original key\n");
  WriteFile(project_ + "/.env.local", "TOKEN=1\n");
  for (const std::string& p :
       {project_ + "/certs", project_ + "/certs/server.pem", project_ + "/.env.local"}) {
    ASSERT_EQ(::chown(p.c_str(), SandboxHostUid(), SandboxHostGid()), 0) << p;
  }
  const std::string global = dir().Path("pi-global-sandbox.json");
  WriteFile(global, R"({"enabled": true,
    "filesystem": {"allowWrite": ["."], "denyWrite": ["*.pem", "*.key", ".env.*"]}})");
  nlohmann::json r = RunJson({"--user-policy", global, "--cwd", project_},
                             Sh("echo evil >> certs/server.pem; echo k > certs/new.key; "
                                "echo x > .env.prod; echo work > main.py && echo landed"),
                             options_);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["stdout"].get<std::string>(), "landed\n") << Describe(r);
  EXPECT_EQ(ReadFile(project_ + "/certs/server.pem"), "original key\n");
  EXPECT_FALSE(PathExists(project_ + "/certs/new.key"));
  EXPECT_FALSE(PathExists(project_ + "/.env.prod"));
  EXPECT_EQ(ReadFile(project_ + "/main.py"), "work\n");
  // The result says what the globs did and what they mean for files made later.
  ASSERT_TRUE(r["notes"].is_array()) << Describe(r);
  EXPECT_THAT(r["notes"].dump(), HasSubstr("*.pem"));
  EXPECT_THAT(r["notes"].dump(), HasSubstr("new files matching it are refused"));
  EXPECT_TRUE(HasViolation(r, "filesystem", "new.key")) << Describe(r);
}

}  // namespace
}  // namespace moat::e2e
