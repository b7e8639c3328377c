// Environment leakage: nothing of moat's own environment reaches the command (not through its
// environment, nor through init's /proc entries); --env values do.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(E2eTest, HostEnvironmentDoesNotLeakButEnvFlagsDo) {
  const std::string secret = UniqueMarker("moat-e2e-env-secret");
  const std::string shown = UniqueMarker("moat-e2e-env-shown");
  MoatOptions options;
  options.env = {absl::StrCat("MOAT_E2E_SECRET=", secret),
                 absl::StrCat("GITHUB_TOKEN=", secret, "-gh"),
                 absl::StrCat("AWS_SECRET_ACCESS_KEY=", secret, "-aws"),
                 absl::StrCat("SSH_AUTH_SOCK=/tmp/", secret, ".sock")};
  std::string script =
      "env\n"
      "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f 2>/dev/null; "
      "done\n"
      "echo \"HOME=$HOME PWD=$(pwd)\"\n";
  // Without --json: the output must be raw, not masked by the sanitizer.
  MoatResult r = RunPlain({"--env", absl::StrCat("SHOWN=", shown), "--env", "PATH=/usr/bin:/bin"},
                          Sh(script), options);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("SHOWN=", shown))) << r.out;
  EXPECT_THAT(r.out, HasSubstr("PATH=/usr/bin:/bin\n")) << "--env overrides the default PATH";
  EXPECT_THAT(r.out, HasSubstr("HOME=/tmp PWD=/workspace")) << r.out;
  EXPECT_THAT(r.out + r.err, Not(HasSubstr(secret)))
      << "ATTACK SUCCEEDED: moat's environment leaked into the sandbox\n"
      << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("MOAT_E2E_SECRET"))) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("GITHUB_TOKEN"))) << r.out;
}

TEST_F(E2eTest, HostnameIsTheSandboxs) {
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  nlohmann::json r = RunJson({}, Sh("cat /proc/sys/kernel/hostname; uname -n"));
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["stdout"], "moat\nmoat\n") << Describe(r);
  char after[256] = {};
  ::gethostname(after, sizeof(after) - 1);
  EXPECT_STREQ(after, host);
}

}  // namespace
}  // namespace moat::e2e
