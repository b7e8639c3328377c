#include "sandbox/host_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "util/testing/temp_dir.h"

namespace moat::sandbox {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

class HostViewTest : public ::testing::Test {
 protected:
  std::string Make(const std::string& rel, bool is_dir = true) {
    std::string path = dir_ + "/" + rel;
    std::system(("mkdir -p '" + (is_dir ? path : path.substr(0, path.rfind('/'))) + "'").c_str());
    if (!is_dir) std::ofstream(path) << "x";
    return path;
  }
  // The host of a user whose home is `home`, under this test's own home root.
  HostContext Host(const std::string& home, const std::string& proc_net_unix = "/nonexistent") {
    HostContext host;
    host.home = home;
    host.home_root = dir_ + "/home";
    host.proc_net_unix = proc_net_unix;
    return host;
  }
  // Not under /tmp, which the sandbox has of its own: homes there need no hiding.
  ScopedTempDir tmp_{"moat-host-view", "/var/lib"};
  const std::string dir_ = tmp_.path();
};

TEST_F(HostViewTest, ParsesPathSocketsFromProcNetUnix) {
  std::string file = Make("unix", false);
  std::ofstream(file)
      << "Num       RefCount Protocol Flags    Type St Inode Path\n"
         "0000000000000000: 00000002 00000000 00010000 0001 01 20 /run/dbus/system_bus_socket\n"
         "0000000000000000: 00000002 00000000 00010000 0001 01 21 @/tmp/.X11-unix/X0\n"
         "0000000000000000: 00000003 00000000 00000000 0001 03 22\n"
         "0000000000000000: 00000002 00000000 00010000 0001 01 23 /srv/app/api.sock\n"
         "0000000000000000: 00000002 00000000 00010000 0001 01 24 /srv/my agent.sock\n"
         "0000000000000000: 00000002 00000000 00010000 0001 01 25 relative.sock\n";
  EXPECT_EQ(HostSocketPaths(file),
            (std::vector<std::string>{"/run/dbus/system_bus_socket", "/srv/app/api.sock",
                                      "/srv/my agent.sock"}));
}

TEST_F(HostViewTest, HidesCredentialsHomesAndReachableSockets) {
  std::string home = Make("home/alice");
  std::string ssh = Make("home/alice/.ssh");
  std::string bob_aws = Make("home/bob/.aws");
  std::string netrc = Make("home/bob/.netrc", false);
  std::string unix_file = Make("unix", false);
  std::ofstream(unix_file) << "header\n"
                              "0: 2 0 10000 1 1 20 /run/x.sock\n"
                              "0: 2 0 10000 1 1 21 /srv/app/api.sock\n"
                              "0: 2 0 10000 1 1 22 " +
                                  home + "/agent.sock\n";
  HostContext host = Host(home, unix_file);
  Policy policy;
  policy.deny_read = {"/etc/shadow-test", "/root/.ssh"};
  absl::StatusOr<MountOptions> m = MountOptionsFor(policy, host, std::nullopt);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<std::string>& h = m->hidden_paths;
  EXPECT_THAT(h, Contains(home));
  EXPECT_THAT(h, Not(Contains(ssh)));  // out of reach under the hidden home: no mount step
  EXPECT_THAT(h, Contains(bob_aws));
  EXPECT_THAT(h, Contains(netrc));
  EXPECT_THAT(h, Contains("/root"));
  EXPECT_THAT(h, Not(Contains("/root/.ssh")));  // the same under /root
  EXPECT_THAT(h, Contains("/etc/shadow-test"));
  EXPECT_THAT(h, Contains("/srv/app/api.sock"));
  EXPECT_THAT(h, Not(Contains("/run/x.sock")));         // /run is empty inside anyway
  EXPECT_THAT(h, Not(Contains(home + "/agent.sock")));  // covered by the hidden home
  EXPECT_THAT(h, Not(Contains(dir_ + "/home/bob")));    // other homes: only their credentials
  EXPECT_FALSE(m->workspace_dir.has_value());
}

TEST_F(HostViewTest, HomeStaysVisibleWhenThePolicySaysSo) {
  std::string home = Make("home/alice");
  std::string ssh = Make("home/alice/.ssh");
  HostContext host = Host(home);
  Policy policy;
  policy.hide_home = false;
  absl::StatusOr<MountOptions> m = MountOptionsFor(policy, host, std::nullopt);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->hidden_paths, Not(Contains(home)));
  EXPECT_THAT(m->hidden_paths, Contains(ssh));  // credentials stay hidden in a visible home
  EXPECT_THAT(m->hidden_paths, Contains("/root"));
}

TEST_F(HostViewTest, FindsHomesInPasswd) {
  std::string passwd = Make("passwd", false);
  std::ofstream(passwd) << "root:x:0:0:root:/root:/bin/bash\n"
                           "broken line\n"
                           "alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\n";
  EXPECT_EQ(HomeFromPasswd(passwd, "alice", 0), "/home/alice");
  EXPECT_EQ(HomeFromPasswd(passwd, "", 1000), "/home/alice");
  EXPECT_EQ(HomeFromPasswd(passwd, "", 0), "/root");
  EXPECT_EQ(HomeFromPasswd(passwd, "bob", 0), "");
  EXPECT_EQ(HomeFromPasswd(passwd, "", 4242), "");
  EXPECT_EQ(HomeFromPasswd(dir_ + "/missing", "alice", 0), "");
}

TEST_F(HostViewTest, WorkspaceMustBeADirectory) {
  HostContext host;
  host.proc_net_unix = "/nonexistent";
  absl::StatusOr<MountOptions> m = MountOptionsFor(Policy{}, host, Make("file", false));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("is not a directory"));
  m = MountOptionsFor(Policy{}, host, dir_);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->workspace_dir, dir_);
}

// A project in the hidden home is shown through it: the home becomes a skeleton, its credential
// stores hidden one by one; a directory the policy hides is refused as the working directory.
TEST_F(HostViewTest, WorkingDirectoryInTheHiddenHomeIsShownThroughIt) {
  std::string home = Make("home/alice");
  std::string project = Make("home/alice/src/app");
  std::string ssh = Make("home/alice/.ssh");
  HostContext host = Host(home);
  absl::StatusOr<MountOptions> m = MountOptionsFor(Policy{}, host, std::nullopt, project);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->home_skeletons, Contains(home));
  EXPECT_THAT(m->hidden_paths, Not(Contains(home)));
  EXPECT_THAT(m->hidden_paths, Contains(ssh));
  EXPECT_EQ(m->working_dir, project);
  EXPECT_TRUE(m->show_working_dir);

  // Writable: shown by its own bind, no read-only one on top.
  Policy writable;
  writable.allow_write = {project};
  m = MountOptionsFor(writable, host, std::nullopt, project);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->home_skeletons, Contains(home));
  EXPECT_FALSE(m->show_working_dir);

  // Visible anyway (in the read-only host view): nothing to show. Under /tmp (the sandbox's
  // own) it must be shown.
  m = MountOptionsFor(Policy{}, host, std::nullopt, "/usr");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->show_working_dir);
  EXPECT_THAT(m->hidden_paths, Contains(home));
  char tmpl[] = "/tmp/moat-host-view-cwd-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  m = MountOptionsFor(Policy{}, host, std::nullopt, std::string(tmpl));
  ::rmdir(tmpl);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->show_working_dir);

  // A credential store, or what denyRead hides, is never the working directory.
  Policy deny;
  deny.deny_read = {project + "/secret"};
  std::string secret = Make("home/alice/src/app/secret");
  for (const std::string& hidden : {ssh, secret}) {
    m = MountOptionsFor(deny, host, std::nullopt, hidden);
    ASSERT_FALSE(m.ok()) << hidden;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("is hidden from the sandbox"));
  }
  m = MountOptionsFor(Policy{}, host, std::nullopt, home + "/missing");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("is not a directory"));
  m = MountOptionsFor(Policy{}, host, std::nullopt, "/proc/self");
  ASSERT_FALSE(m.ok());
}

// In /tmp, the sandbox's own, nothing of the host shows but what a writable path binds there: a
// HOME under /tmp needs no cover (covering it would cover the mount points made in it), a
// denyRead path inside a writable /tmp directory still does.
TEST_F(HostViewTest, InTheSandboxsOwnTmpOnlyWhatIsShownNeedsCovering) {
  char tmpl[] = "/tmp/moat-host-view-home-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string tmp_home = tmpl;
  std::system(("mkdir -p '" + tmp_home + "/proj/secret'").c_str());
  HostContext host = Host(tmp_home);
  Policy policy;
  policy.allow_write = {tmp_home + "/proj"};
  policy.deny_read = {tmp_home + "/proj/secret", "/tmp/elsewhere"};
  absl::StatusOr<MountOptions> m = MountOptionsFor(policy, host, std::nullopt);
  std::system(("rm -rf '" + tmp_home + "'").c_str());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->hidden_paths, Not(Contains(tmp_home)));
  EXPECT_THAT(m->hidden_paths, Not(Contains("/tmp/elsewhere")));
  EXPECT_THAT(m->hidden_paths, Contains(tmp_home + "/proj/secret"));
  EXPECT_THAT(m->home_skeletons, ::testing::IsEmpty());

  // A host socket in a --workspace directory is reachable at /workspace/...: still covered.
  const std::string ws = Make("ws");
  const std::string unix_file = Make("unix", false);
  std::ofstream(unix_file) << "header\n0: 2 0 10000 1 1 20 " << ws << "/agent.sock\n";
  host.proc_net_unix = unix_file;
  m = MountOptionsFor(Policy{}, host, ws);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(m->hidden_paths, Contains("/workspace/agent.sock"));
}

}  // namespace
}  // namespace moat::sandbox
