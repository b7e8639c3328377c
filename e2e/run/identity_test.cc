// Identity: no capabilities, uid 0 inside is an unprivileged uid outside, and neither setuid bits
// nor file capabilities grant anything at exec.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void ExpectNoPrivileges(const std::string& out) {
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat(set, ":\t0000000000000000"))) << out;
  }
  EXPECT_THAT(out, HasSubstr("NoNewPrivs:\t1")) << out;
  EXPECT_THAT(out, HasSubstr("Seccomp:\t2")) << out;
}

TEST_F(E2eTest, NoCapabilitiesNoNewPrivsSeccompOn) {
  nlohmann::json r = RunJson({}, {Attack("id_probe")});
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, HasSubstr("uid=0 euid=0 gid=0 egid=0")) << out;
  ExpectNoPrivileges(out);
  // Groups: the supervisor's supplementary groups (root's gid 0 among them) are gone.
  EXPECT_THAT(out, ::testing::ContainsRegex("Groups:\t *\n")) << out;
}

TEST_F(E2eTest, RootInsideMapsToOneUnprivilegedHostUid) {
  nlohmann::json r = RunJson({}, Sh("cat /proc/self/uid_map /proc/self/gid_map"));
  ASSERT_TRUE(r.is_object());
  std::vector<std::string> lines =
      absl::StrSplit(r["stdout"].get<std::string>(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << Describe(r);  // one range each
  for (const std::string& line : lines) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_EQ(f.size(), 3u) << line;
    EXPECT_EQ(f[0], "0") << line;
    EXPECT_NE(f[1], "0") << "ATTACK SURFACE: the sandbox's root is host root: " << line;
    EXPECT_EQ(f[2], "1") << "only one id is mapped: " << line;
  }
}

TEST_F(E2eTest, CannotBecomeAnotherUserOrGainCapabilities) {
  nlohmann::json r = RunJson({}, {Attack("misc_probe"), "ids"});
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_EQ(r["exit_code"], 0) << Describe(r);
  EXPECT_THAT(out, Not(HasSubstr("ESCAPED"))) << Describe(r);
  for (const char* what : {"setuid 1000", "setgid 1000", "setgroups", "rewrite uid_map",
                           "capset all", "ambient raise", "clear no_new_privs"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("blocked ", what, ": "))) << Describe(r);
  }
}

// Writes a version-2 security.capability xattr granting `caps` (permitted and effective).
bool SetFileCaps(const std::string& path, uint64_t caps) {
  struct vfs_cap_data data = {};
  data.magic_etc = VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE;
  data.data[0].permitted = static_cast<uint32_t>(caps);
  data.data[1].permitted = static_cast<uint32_t>(caps >> 32);
  return ::setxattr(path.c_str(), "security.capability", &data, XATTR_CAPS_SZ_2, 0) == 0;
}

TEST_F(E2eTest, SetuidAndFileCapabilityBinariesGrantNothing) {
  const std::string suid_root = dir().Path("suid-root");
  const std::string suid_sandbox = dir().Path("suid-sandbox");
  const std::string fcaps = dir().Path("file-caps");
  for (const std::string& path : {suid_root, suid_sandbox, fcaps}) {
    std::ifstream in(Attack("id_probe"), std::ios::binary);
    std::ofstream out(path, std::ios::binary);
    out << in.rdbuf();
  }
  ASSERT_EQ(::chmod(suid_root.c_str(), 06755), 0);
  ASSERT_EQ(::chown(suid_sandbox.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(suid_sandbox.c_str(), 06755), 0);
  ASSERT_EQ(::chmod(fcaps.c_str(), 0755), 0);
  bool have_fcaps = SetFileCaps(fcaps, (1ull << CAP_SYS_ADMIN) | (1ull << CAP_DAC_OVERRIDE) |
                                           (1ull << CAP_SETUID) | (1ull << CAP_SYS_PTRACE));
  std::vector<std::string> binaries = {suid_root, suid_sandbox};
  if (have_fcaps) binaries.push_back(fcaps);
  for (const std::string& bin : binaries) {
    nlohmann::json r = RunJson({}, {bin});
    ASSERT_TRUE(r.is_object());
    EXPECT_EQ(r["exit_code"], 0) << bin << "\n" << Describe(r);
    std::string out = r["stdout"];
    SCOPED_TRACE(bin);
    EXPECT_THAT(out, HasSubstr("uid=0 euid=0 gid=0 egid=0")) << out;
    ExpectNoPrivileges(out);
  }
  // The system's own setuid programs: whatever they manage (su lets root in without a password,
  // and the sandbox is root of its namespace), the shell they start has no capabilities.
  std::string script =
      "su -c 'grep CapEff /proc/self/status' root </dev/null 2>/dev/null\n"
      "test -x /usr/bin/sudo && sudo -n grep CapEff /proc/self/status 2>/dev/null\n"
      "echo done\n";
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, HasSubstr("done")) << Describe(r);
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "CapEff:")) {
      EXPECT_EQ(line, "CapEff:\t0000000000000000") << "ATTACK SUCCEEDED: " << out;
    }
  }
  if (!have_fcaps) GTEST_SKIP() << "file capabilities not supported on this file system";
}

}  // namespace
}  // namespace moat::e2e
