// Credential theft: a fake home (HOME points at it; the real one is never touched) full of
// credential stores, world-readable on purpose so that only moat's hiding protects them. Every
// route to them must fail: direct paths, `..`, /proc/*/root, symlinks planted inside or left in a
// workspace, inherited descriptors. Output is read without --json: the sanitizer's secret masking
// must not be what hides a leak.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Relative to the home; each file holds a token that must never appear in the sandbox's output.
constexpr const char* kCredentialFiles[] = {".ssh/id_rsa",
                                            ".ssh/config",
                                            ".aws/credentials",
                                            ".config/gh/hosts.yml",
                                            ".netrc",
                                            ".git-credentials",
                                            ".docker/config.json",
                                            ".kube/config",
                                            ".gnupg/private-keys-v1.d/key",
                                            ".npmrc",
                                            ".pypirc",
                                            ".config/gcloud/credentials.db",
                                            ".azure/accessTokens",
                                            ".password-store/x.gpg",
                                            ".config/moat/policy.yaml",
                                            ".pi/agent.json"};

class CredentialsTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    home_ = dir().Path("home");
    token_ = UniqueMarker("moat-e2e-credential");
    for (const char* rel : kCredentialFiles) Plant(rel);
    Plant("notes.txt");  // the home itself is hidden by default, not only its credentials
    public_file_ = dir().Path("public.txt");
    WriteFile(public_file_, absl::StrCat("public-", token_, "\n"), 0644);
    options_.home = home_;
    options_.cwd = dir().path();
  }

  void Plant(const std::string& rel) {
    std::string path = absl::StrCat(home_, "/", rel);
    MakeDirs(path.substr(0, path.rfind('/')));
    // A comment line: ~/.config/moat/policy.yaml is read by moat itself and must stay valid.
    WriteFile(path, absl::StrCat("# secret-", token_, " ", rel, "\n"), 0644);
  }

  // Runs `script` without --json and checks that no secret came out while the control did.
  void ExpectNoSecret(const std::string& script, const std::vector<std::string>& flags = {}) {
    std::string full = absl::StrCat("cat '", public_file_, "'\n", script);
    MoatResult r = RunPlain(flags, Sh(full), options_);
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("public-", token_)))
        << "control: a public file next to the home must be readable\n"
        << r.err;
    EXPECT_THAT(r.out + r.err, Not(HasSubstr(absl::StrCat("secret-", token_))))
        << "ATTACK SUCCEEDED: a credential was read\n--- stdout ---\n"
        << r.out << "\n--- stderr ---\n"
        << r.err;
  }

  // A shell loop over every credential path, each given as `prefix + home + "/" + rel`.
  std::string CatAll(absl::string_view prefix) {
    std::string script;
    for (const char* rel : kCredentialFiles) {
      absl::StrAppend(&script, "cat '", prefix, home_, "/", rel, "' 2>/dev/null\n");
    }
    absl::StrAppend(&script, "cat '", prefix, home_, "/notes.txt' 2>/dev/null\n");
    return script;
  }

  std::string home_;
  std::string token_;
  std::string public_file_;
  MoatOptions options_;
};

TEST_F(CredentialsTest, DirectReadsFail) {
  ExpectNoSecret(absl::StrCat(CatAll(""), "ls -la '", home_, "' '", home_, "/.ssh'\n",
                              "grep -rs secret- '", dir().path(), "'\n"));
}

TEST_F(CredentialsTest, ProcRootAndDotDotTricksFail) {
  std::string script;
  for (const char* prefix :
       {"/proc/self/root", "/proc/1/root", "/proc/2/root", "/proc/thread-self/root",
        "/proc/self/cwd/..", "/tmp/..", "/workspace/../../..", "/dev/shm/../..", "//", "/./"}) {
    script += CatAll(prefix);
  }
  // `..` inside the hidden tree, and relative paths from /.
  absl::StrAppend(&script, "cat '", home_, "/.ssh/../.ssh/id_rsa' '", home_,
                  "/.aws/./credentials' 2>/dev/null\n", "cd / && cat '", home_.substr(1),
                  "/.ssh/id_rsa' 2>/dev/null\n", "cd '", home_,
                  "' 2>/dev/null && cat .ssh/id_rsa "
                  ".netrc 2>/dev/null\n");
  ExpectNoSecret(script);
}

TEST_F(CredentialsTest, SymlinksPlantedInsideFail) {
  std::string script;
  int n = 0;
  for (const char* rel : kCredentialFiles) {
    for (const char* where : {"/tmp", "/workspace", "/dev/shm"}) {
      absl::StrAppend(&script, "ln -s '", home_, "/", rel, "' ", where, "/l", n, " && cat ", where,
                      "/l", n, " 2>/dev/null\n");
      ++n;
    }
  }
  // A directory symlink, a chain, and a hard link attempt.
  absl::StrAppend(&script, "ln -s '", home_, "' /tmp/h && cat /tmp/h/.ssh/id_rsa 2>/dev/null\n",
                  "ln -s /tmp/h /tmp/h2 && cat /tmp/h2/.aws/credentials 2>/dev/null\n", "ln '",
                  home_, "/.ssh/id_rsa' /tmp/hard 2>/dev/null && cat /tmp/hard\n");
  ExpectNoSecret(script);
}

TEST_F(CredentialsTest, SymlinksLeftInTheWorkspaceFail) {
  TempDir ws;
  ASSERT_EQ(::chown(ws.path().c_str(), 65534, 65534), 0);
  // As a previous run (or a cloned repository) could have left them.
  ASSERT_EQ(::symlink((home_ + "/.ssh/id_rsa").c_str(), ws.Path("abs").c_str()), 0);
  // Relative: right on the host (a sibling directory), and with enough `..` to reach / inside.
  const std::string sibling = dir().path().substr(dir().path().rfind('/') + 1);
  ASSERT_EQ(::symlink(absl::StrCat("../", sibling, "/home/.aws/credentials").c_str(),
                      ws.Path("rel-from-dir").c_str()),
            0);
  ASSERT_EQ(::symlink(home_.c_str(), ws.Path("homelink").c_str()), 0);
  ASSERT_EQ(::symlink(absl::StrCat("../../../../../../../..", home_, "/.netrc").c_str(),
                      ws.Path("dotdot").c_str()),
            0);
  ExpectNoSecret(
      "cat /workspace/abs /workspace/rel-from-dir /workspace/homelink/.ssh/id_rsa "
      "/workspace/dotdot 2>/dev/null; cat abs dotdot 2>/dev/null",
      {"--workspace", ws.path()});
}

// The home given through a symlink, and a symlink on the host pointing into the home.
TEST_F(CredentialsTest, SymlinkedHomesAndHostAliasesFail) {
  const std::string link = dir().Path("home-link");
  ASSERT_EQ(::symlink(home_.c_str(), link.c_str()), 0);
  const std::string alias = dir().Path("ssh-alias");
  ASSERT_EQ(::symlink((home_ + "/.ssh").c_str(), alias.c_str()), 0);
  options_.home = link;
  ExpectNoSecret(
      absl::StrCat(CatAll(""), "cat '", link, "/.ssh/id_rsa' '", alias, "/id_rsa' 2>/dev/null\n"));
}

TEST_F(CredentialsTest, CredentialStoresStayHiddenWhenTheHomeIsShown) {
  const std::string policy = dir().Path("show-home.yaml");
  WriteFile(policy, "filesystem:\n  hideHome: false\n", 0644);
  // Control: with the home shown, an ordinary file in it is readable.
  MoatResult shown =
      RunPlain({"--policy", policy}, Sh(absl::StrCat("cat '", home_, "/notes.txt'")), options_);
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  ASSERT_THAT(shown.out, HasSubstr("notes.txt")) << "hideHome: false did not show the home";
  std::string script;
  for (const char* rel : kCredentialFiles) {
    absl::StrAppend(&script, "cat '", home_, "/", rel, "' 2>/dev/null\n");
  }
  absl::StrAppend(&script, "ls -laR '", home_, "/.ssh' '", home_, "/.aws' 2>&1\n");
  // notes.txt is legitimately visible here, so the check is per credential file.
  MoatResult r = RunPlain({"--policy", policy}, Sh(script), options_);
  for (const char* rel : kCredentialFiles) {
    EXPECT_THAT(r.out, Not(HasSubstr(absl::StrCat(" ", rel, "\n"))))
        << "ATTACK SUCCEEDED: " << rel << " was readable with hideHome: false\n"
        << r.out;
  }
}

TEST_F(CredentialsTest, OtherUsersHomesHideTheirCredentials) {
  const std::string other = absl::StrCat("/home/", UniqueMarker("moat-e2e-user"));
  MakeDirs(other + "/.ssh");
  MakeDirs(other + "/.aws");
  WriteFile(other + "/.ssh/id_ed25519", absl::StrCat("secret-", token_, " other\n"), 0644);
  WriteFile(other + "/.aws/credentials", absl::StrCat("secret-", token_, " other\n"), 0644);
  ExpectNoSecret(absl::StrCat("cat '", other, "/.ssh/id_ed25519' '", other,
                              "/.aws/credentials' 2>/dev/null; ls -la '", other, "/.ssh'"));
  RemoveTree(other);
}

TEST_F(CredentialsTest, RootsHomeIsHiddenAndRootOnlyFilesAreUnreadable) {
  // Files only root may read on the host stay unreadable: root inside is not root outside.
  const std::string root_only = dir().Path("root-only.txt");
  WriteFile(root_only, absl::StrCat("secret-", token_, " root-only\n"), 0600);
  std::string script =
      absl::StrCat("echo \"root entries: $(ls -A /root | wc -l)\"\n", "cat '", root_only,
                   "' 2>/dev/null\n", "cat /etc/shadow /etc/gshadow 2>/dev/null | head -c 200\n",
                   "cat /etc/ssh/ssh_host_*_key 2>/dev/null | head -c 200\n");
  MoatResult r = RunPlain({}, Sh(script), options_);
  EXPECT_THAT(r.out, HasSubstr("root entries: 0\n")) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr(token_))) << r.out;
  if (PathExists("/etc/shadow")) {
    EXPECT_THAT(r.out, Not(HasSubstr("root:"))) << "ATTACK SUCCEEDED: /etc/shadow was read\n"
                                                << r.out;
  }
  EXPECT_THAT(r.out, Not(HasSubstr("PRIVATE KEY"))) << "ATTACK SUCCEEDED: a host key was read";
}

TEST_F(CredentialsTest, InheritedDescriptorsAreClosed) {
  // A careless caller leaves descriptors open: a host directory (openat(fd, "..") escapes the mount
  // namespace) and a credential file.
  int dir_fd = ::open((home_ + "/.ssh").c_str(), O_RDONLY | O_DIRECTORY);
  int file_fd = ::open((home_ + "/.aws/credentials").c_str(), O_RDONLY);
  int root_fd = ::open("/", O_PATH);
  ASSERT_GE(dir_fd, 0);
  ASSERT_GE(file_fd, 0);
  ASSERT_GE(root_fd, 0);
  options_.inherit_fds = {dir_fd, file_fd, root_fd};
  MoatResult r = RunPlain({}, {Attack("fd_probe")}, options_);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ok only stdin, stdout and stderr are open")) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("ESCAPED"))) << r.out;
  // And by number, through the shell.
  MoatResult cat =
      RunPlain({},
               Sh(absl::StrCat("cat /proc/self/fd/", file_fd, " /dev/fd/", file_fd,
                               " 2>/dev/null; ls /proc/self/fd/", dir_fd, "/ 2>/dev/null")),
               options_);
  EXPECT_THAT(cat.out, Not(HasSubstr(token_))) << cat.out;
  ::close(dir_fd);
  ::close(file_fd);
  ::close(root_fd);
}

}  // namespace
}  // namespace moat::e2e
