#include "sandbox/cli/rootless.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "sandbox/testing/status_matchers.h"

namespace moat::cli {
namespace {

using ::moat::matchers::IsOk;
using ::moat::matchers::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatePathsTest, RootKeepsTheSystemPaths) {
  StatePaths p = StatePathsFor({.euid = 0, .home = "/root", .xdg_state_home = "/x"});
  EXPECT_EQ(p.audit_log, "/var/lib/moat/egress-audit.jsonl");
  EXPECT_EQ(p.netns_pool_dir, "/run/moat/netns");
  EXPECT_EQ(p.runtime_dir, "/run/moat");
  EXPECT_EQ(EgressRuntimeDir({.euid = 0, .home = "/root"}).value_or(""), "/run/moat");
}

TEST(StatePathsTest, AUserWritesUnderItsXdgStateHomeAndHasNoPool) {
  StatePaths p = StatePathsFor({.euid = 1000,
                                .home = "/home/u",
                                .xdg_state_home = "/home/u/st",
                                .xdg_runtime_dir = "/run/user/1000"});
  EXPECT_EQ(p.audit_log, "/home/u/st/moat/egress-audit.jsonl");
  EXPECT_EQ(p.netns_pool_dir, "") << "only root can make namespaces in the host's user namespace";
  EXPECT_EQ(p.runtime_dir, "/run/user/1000/moat");
}

// The sandbox's resolv.conf of an ordinary user's run with egress goes to its own runtime
// directory, never to /run/moat (root's) or a guessed one: without $XDG_RUNTIME_DIR the run is
// refused, saying what to do.
TEST(StatePathsTest, AUsersEgressNeedsItsXdgRuntimeDir) {
  EXPECT_EQ(EgressRuntimeDir({.euid = 1000, .home = "/home/u", .xdg_runtime_dir = "/run/user/1000"})
                .value_or(""),
            "/run/user/1000/moat");
  for (const char* runtime : {"", "run/user/1000"}) {
    SCOPED_TRACE(runtime);
    EXPECT_EQ(
        StatePathsFor({.euid = 1000, .home = "/home/u", .xdg_runtime_dir = runtime}).runtime_dir,
        "");
    EXPECT_THAT(EgressRuntimeDir({.euid = 1000, .home = "/home/u", .xdg_runtime_dir = runtime}),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("egress"), HasSubstr("XDG_RUNTIME_DIR"),
                               HasSubstr("systemd-run --user --scope"), HasSubstr("as root"))));
  }
}

TEST(StatePathsTest, UnsetOrRelativeXdgStateHomeMeansDotLocalState) {
  EXPECT_EQ(StatePathsFor({.euid = 1000, .home = "/home/u"}).audit_log,
            "/home/u/.local/state/moat/egress-audit.jsonl");
  EXPECT_EQ(StatePathsFor({.euid = 1000, .home = "/home/u", .xdg_state_home = "rel"}).audit_log,
            "/home/u/.local/state/moat/egress-audit.jsonl");
}

// A Debian 12 user under systemd: pure v2, a user manager, inside a delegated scope.
RootlessHost DelegatedUser() {
  return {.euid = 1000,
          .user = "dev",
          .has_v2 = true,
          .systemd = true,
          .user_manager = true,
          .own_delegated = true,
          .parent_writable = true,
          .layout = "v2 (/sys/fs/cgroup)"};
}

TEST(RootlessCgroupTest, RootAndADelegatedWritableScopePass) {
  EXPECT_THAT(CheckRootlessCgroup({.euid = 0, .v1_controllers = true}), IsOk());
  EXPECT_THAT(CheckRootlessCgroup(DelegatedUser()), IsOk());
  RootlessHost requested = DelegatedUser();
  requested.own_delegated = false;
  requested.requested = true;
  EXPECT_THAT(CheckRootlessCgroup(requested), IsOk());
}

TEST(RootlessCgroupTest, NotInADelegatedScopeSaysSystemdRun) {
  RootlessHost h = DelegatedUser();
  h.own_delegated = false;
  h.parent_writable = false;
  EXPECT_THAT(CheckRootlessCgroup(h),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("rootless cgroup"), HasSubstr("uid 1000"),
                             HasSubstr("systemd-run --user --scope -p Delegate=yes"),
                             HasSubstr("run moat as root"))));
  // Delegated, but to root (a system service's scope): not this user's to write.
  h.own_delegated = true;
  EXPECT_THAT(CheckRootlessCgroup(h), StatusIs(absl::StatusCode::kFailedPrecondition,
                                               HasSubstr("not delegated to this user")));
}

TEST(RootlessCgroupTest, NoUserManagerSaysEnableLinger) {
  RootlessHost h = DelegatedUser();
  h.own_delegated = false;
  h.user_manager = false;
  EXPECT_THAT(CheckRootlessCgroup(h),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("loginctl enable-linger dev"), HasSubstr("systemd-run"))));
}

TEST(RootlessCgroupTest, CgroupV1IsRefusedEvenInsideADelegatedScope) {
  RootlessHost h = DelegatedUser();
  h.v1_controllers = true;
  h.layout = "hybrid (v1: cpu,memory,pids; v2: /sys/fs/cgroup/unified)";
  EXPECT_THAT(CheckRootlessCgroup(h),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("cgroup v1"), HasSubstr("hybrid (v1"),
                             HasSubstr("systemd.unified_cgroup_hierarchy=1"),
                             Not(HasSubstr("systemd-run")))));
}

TEST(RootlessCgroupTest, NoSystemdSaysAskForADelegatedCgroup) {
  RootlessHost h = DelegatedUser();
  h.systemd = false;
  h.user_manager = false;
  h.own_delegated = false;
  EXPECT_THAT(CheckRootlessCgroup(h),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("no systemd"), HasSubstr("MOAT_CGROUP_PARENT"))));
}

TEST(RootlessCgroupTest, ARequestedParentTheUserCannotWriteIsRefused) {
  RootlessHost h = DelegatedUser();
  h.requested = true;
  h.parent_writable = false;
  EXPECT_THAT(CheckRootlessCgroup(h), StatusIs(absl::StatusCode::kFailedPrecondition,
                                               HasSubstr("MOAT_CGROUP_PARENT names a cgroup")));
}

// This machine as it is: root passes; any other uid is told what to do, never passed by default
// on a host with v1 controllers.
TEST(RootlessCgroupTest, ThisHost) {
  absl::StatusOr<RootlessHost> host = CurrentRootlessHost();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->euid, ::geteuid());
  EXPECT_FALSE(host->layout.empty());
  if (host->euid == 0) {
    EXPECT_THAT(CheckRootlessCgroup(*host), IsOk());
  }
}

// Ubuntu 24.04's AppArmor restriction: an unconfined ordinary user is refused before any step,
// told the sysctl and the profile; root, a profile's process, and hosts without the sysctl
// (or with it off) are not.
TEST(UsernsRestrictionTest, AnUnconfinedUserUnderTheRestrictionIsToldToInstallTheProfile) {
  EXPECT_THAT(CheckUsernsRestriction(
                  {.euid = 1000, .restrict_unprivileged_userns = 1, .label = "unconfined"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("kernel.apparmor_restrict_unprivileged_userns=1"),
                             HasSubstr("integrations/pi/apparmor/moat"),
                             HasSubstr("apparmor_parser -r /etc/apparmor.d/moat"),
                             HasSubstr("or run moat as root"))));
}

TEST(UsernsRestrictionTest, RootAProfileOrNoRestrictionPass) {
  EXPECT_THAT(
      CheckUsernsRestriction({.euid = 0, .restrict_unprivileged_userns = 1, .label = "unconfined"}),
      IsOk());
  EXPECT_THAT(CheckUsernsRestriction(
                  {.euid = 1000, .restrict_unprivileged_userns = 1, .label = "moat (unconfined)"}),
              IsOk());
  EXPECT_THAT(CheckUsernsRestriction(
                  {.euid = 1000, .restrict_unprivileged_userns = 0, .label = "unconfined"}),
              IsOk());
  EXPECT_THAT(CheckUsernsRestriction({.euid = 1000, .label = "unconfined"}), IsOk());
}

TEST(UsernsRestrictionTest, ThisHostIsRead) {
  UsernsRestriction here = CurrentUsernsRestriction();
  EXPECT_EQ(here.euid, ::geteuid());
  const bool has_sysctl =
      ::access("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", F_OK) == 0;
  EXPECT_EQ(here.restrict_unprivileged_userns >= 0, has_sysctl);
}

}  // namespace
}  // namespace moat::cli
