// /etc/resolv.conf as a symlink into /run (systemd-resolved, Ubuntu's default): with egress the
// sandbox must get the DNS stub's resolv.conf there, not a setup failure and not a dangling link.
// moat runs in a mount namespace of the test's own where an overlay makes the host's /etc show a
// symlinked resolv.conf; the host's files are not touched.
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;

class ResolvConfTest : public E2eTest {};

TEST_F(ResolvConfTest, ASymlinkIntoRunGetsTheStubResolver) {
  const std::string upper = dir().Path("etc-upper");
  const std::string work = dir().Path("etc-work");
  MakeDirs(upper);
  MakeDirs(work);
  ASSERT_EQ(::symlink("../run/systemd/resolve/stub-resolv.conf", (upper + "/resolv.conf").c_str()),
            0);
  const std::string policy = dir().Path("policy.yaml");
  WriteFile(policy, "network:\n  allowedDomains: [allowed.test]\n");
  MoatOptions options;
  const std::string overlay = absl::StrCat("lowerdir=/etc,upperdir=", upper, ",workdir=", work);
  options.before_exec = [overlay] {
    // The link's target exists, as on a host running systemd-resolved (its /run hidden by a
    // fresh tmpfs in this namespace only).
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("overlay", "/etc", "overlay", 0, overlay.c_str()) != 0 ||
        ::mount("tmpfs", "/run", "tmpfs", 0, "size=1m") != 0 ||
        ::mkdir("/run/systemd", 0755) != 0 || ::mkdir("/run/systemd/resolve", 0755) != 0) {
      return false;
    }
    FILE* f = std::fopen("/run/systemd/resolve/stub-resolv.conf", "w");
    if (f == nullptr) return false;
    std::fputs("nameserver 127.0.0.53\n", f);
    return std::fclose(f) == 0;
  };
  nlohmann::json r =
      RunJson({"--policy", policy, "--audit-log", dir().Path("audit.jsonl")},
              Sh("readlink /etc/resolv.conf; cat /etc/resolv.conf; echo x >> /etc/resolv.conf || "
                 "echo read-only"),
              options);
  ASSERT_TRUE(r.is_object());
  const std::string out = r["stdout"].get<std::string>();
  EXPECT_THAT(out, HasSubstr("../run/systemd/resolve/stub-resolv.conf\n")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("nameserver 127.0.0.1")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("read-only")) << Describe(r);
}

TEST_F(ResolvConfTest, ASymlinkElsewhereIsRefusedWithAClearMessage) {
  const std::string upper = dir().Path("etc-upper");
  const std::string work = dir().Path("etc-work");
  MakeDirs(upper);
  MakeDirs(work);
  const std::string elsewhere = dir().Path("elsewhere-resolv.conf");
  WriteFile(elsewhere, "nameserver 127.0.0.53\n");
  ASSERT_EQ(::symlink(elsewhere.c_str(), (upper + "/resolv.conf").c_str()), 0);
  const std::string policy = dir().Path("policy.yaml");
  WriteFile(policy, "network:\n  allowedDomains: [allowed.test]\n");
  MoatOptions options;
  const std::string overlay = absl::StrCat("lowerdir=/etc,upperdir=", upper, ",workdir=", work);
  options.before_exec = [overlay] {
    return ::unshare(CLONE_NEWNS) == 0 &&
           ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
           ::mount("overlay", "/etc", "overlay", 0, overlay.c_str()) == 0;
  };
  MoatResult r = RunPlain({"--policy", policy, "--audit-log", dir().Path("audit.jsonl")},
                          {"/bin/echo", "ran"}, options);
  EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("outside /run"));
}

}  // namespace
}  // namespace moat::e2e
