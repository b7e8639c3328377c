// `moat run --cwd DIR`, as a coding agent uses it: the project in the (hidden) home is where the
// command starts, visible at its own path with the rest of the home still hidden; writable only
// when a trusted layer says so (--user-policy); a directory that cannot be shown is a setup
// failure naming it, never a silent empty directory. And `moat policy show`.
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class WorkingDirTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    home_ = dir().Path("home");
    project_ = home_ + "/src/app";
    MakeDirs(project_);
    MakeDirs(home_ + "/.ssh");
    MakeDirs(home_ + "/notes");
    WriteFile(project_ + "/main.py", "print('hello from the project')\n");
    WriteFile(home_ + "/.ssh/id_ed25519", "moat-e2e-private-key\n", 0600);
    WriteFile(home_ + "/notes/todo.txt", "moat-e2e-other-file\n");
    options_.home = home_;
  }

  std::string home_, project_;
  MoatOptions options_;
};

TEST_F(WorkingDirTest, AProjectInTheHiddenHomeIsShownReadOnlyAndAlone) {
  MoatResult r = RunPlain(
      {"--cwd", project_},
      Sh(absl::StrCat("pwd; echo \"PWD=$PWD\"; python3 main.py; ls -A '", home_, "'; cat '", home_,
                      "/.ssh/id_ed25519' '", home_,
                      "/notes/todo.txt' 2>/dev/null; echo x > new.txt || echo 'read-only'")),
      options_);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(project_ + "\nPWD=" + project_ + "\nhello from the project\nsrc\n"))
      << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("moat-e2e-private-key"))) << "ATTACK SUCCEEDED: key read";
  EXPECT_THAT(r.out, Not(HasSubstr("moat-e2e-other-file"))) << "the rest of the home showed";
  EXPECT_THAT(r.out, HasSubstr("read-only"));
  EXPECT_FALSE(PathExists(project_ + "/new.txt"));
}

TEST_F(WorkingDirTest, ATrustedLayerMakesItWritableWithItsConfigurationProtected) {
  const std::string agent_policy = dir().Path("pi-sandbox.json");
  WriteFile(agent_policy, R"({"filesystem": {"allowWrite": ["."]}})");
  nlohmann::json r = RunJson(
      {"--cwd", project_, "--user-policy", agent_policy},
      Sh("echo work > out.txt && echo wrote; mkdir -p .pi/extensions 2>/dev/null || echo refused"),
      options_);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["stdout"].get<std::string>(), "wrote\nrefused\n") << Describe(r);
  EXPECT_EQ(ReadFile(project_ + "/out.txt"), "work\n");
  EXPECT_FALSE(PathExists(project_ + "/.pi"));
  EXPECT_TRUE(HasViolation(r, "filesystem", project_ + "/.pi")) << Describe(r);
}

TEST_F(WorkingDirTest, ADirectoryThatCannotBeShownIsASetupFailure) {
  for (const std::string& cwd : {home_ + "/.ssh", home_ + "/missing"}) {
    MoatResult r = RunPlain({"--cwd", cwd}, {"/bin/echo", "ran"}, options_);
    EXPECT_EQ(r.exit_code, 125) << cwd << ": " << r.out << r.err;
    EXPECT_THAT(r.out, Not(HasSubstr("ran")));
    EXPECT_THAT(r.err, HasSubstr(cwd)) << "the message must name the directory";
  }
}

TEST_F(WorkingDirTest, PolicyShowSaysWhereEachValueCameFrom) {
  const std::string agent_policy = dir().Path("agent.yaml");
  WriteFile(agent_policy, "filesystem:\n  allowWrite: [\".\"]\nlimits:\n  memory: 1G\n");
  MoatResult r = RunMoat({"policy", "show", "--json", "--cwd", project_, "--user-policy",
                          agent_policy, "--pids", "64"},
                         options_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["policy"]["limits"]["memory"], 1ull << 30);
  EXPECT_EQ(j["origins"]["values"]["limits.memory"], agent_policy);
  EXPECT_EQ(j["origins"]["values"]["limits.pids"], "command line");
  EXPECT_EQ(j["origins"]["elements"]["filesystem.allowWrite"][project_], agent_policy);
  EXPECT_EQ(j["origins"]["elements"]["filesystem.denyWrite"][project_ + "/.git/hooks"],
            "moat (protected path)");
  // The same in words, one value a line.
  r = RunMoat({"policy", "show", "--cwd", project_, "--user-policy", agent_policy}, options_);
  EXPECT_THAT(r.out, HasSubstr(agent_policy));
  EXPECT_THAT(r.out, HasSubstr("built-in default"));
}

// A HOME under /tmp (tests, CI runners) is in the sandbox's own /tmp: the project is shown
// there without a home skeleton.
TEST_F(WorkingDirTest, AHomeUnderTmpWorksToo) {
  char tmpl[] = "/tmp/moat-e2e-home-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string tmp_home = tmpl;
  ::chmod(tmp_home.c_str(), 0755);
  const std::string project = tmp_home + "/p";
  MakeDirs(project);
  WriteFile(project + "/hello.txt", "hello\n");
  MoatOptions options;
  options.home = tmp_home;
  MoatResult r = RunPlain({"--cwd", project}, Sh("pwd; cat hello.txt"), options);
  RemoveTree(tmp_home);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, project + "\nhello\n") << r.err;
}

}  // namespace
}  // namespace moat::e2e
