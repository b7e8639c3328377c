// SpawnSandbox and Supervise on real sandboxes, with a real cgroup2 directory: the path pure v2
// hosts take (clone3 with CLONE_INTO_CGROUP, no migration). This machine's cgroup2 mount has no
// cpu/memory/pids controllers, so the cgroup sets no limits here, but the placement and the
// accounting (cpu.stat) are the kernel's own.
#include "sandbox/spawn.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "sandbox/caps.h"
#include "sandbox/cgroup/cgroup_v2.h"
#include "sandbox/host_view.h"
#include "sandbox/netns/netns_prep.h"
#include "sandbox/rlimits.h"
#include "sandbox/supervisor.h"

namespace moat::sandbox {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The advice follows what the step needs, not the words of its name.
TEST(ChildFailureStatusTest, AdviceFollowsWhatTheStepNeeds) {
  absl::Status mount_api = ChildFailureStatus(
      {.step = "pivot_root", .detail = "/new", .error = EINVAL, .needs = StepNeeds::kNewMountApi});
  EXPECT_THAT(mount_api.message(), HasSubstr("sandbox setup failed at step: pivot_root \"/new\""));
  EXPECT_THAT(mount_api.message(), HasSubstr("Linux >= 5.12"));
  absl::Status seccomp =
      ChildFailureStatus({.step = "install", .error = EINVAL, .needs = StepNeeds::kSeccompNotify});
  EXPECT_THAT(seccomp.message(), HasSubstr("user notification (Linux >= 5.5)"));
  // A name that merely mentions another step's words gets the errno's advice.
  absl::Status named = ChildFailureStatus({.step = "bind mount (not pivot_root)", .error = EACCES});
  EXPECT_THAT(named.message(), HasSubstr("check the path's permissions"));
  EXPECT_THAT(named.message(), Not(HasSubstr("5.12")));
  EXPECT_EQ(named.code(), absl::StatusCode::kPermissionDenied);
  absl::Status other = ChildFailureStatus({.step = nullptr, .error = EIO});
  EXPECT_THAT(other.message(), HasSubstr("unknown step"));
  EXPECT_THAT(other.message(), HasSubstr("docs/operations.md"));
}

class SpawnV2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "real sandboxes need root";
    absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout();
    ASSERT_TRUE(layout.ok()) << layout.status();
    if (layout->v2_mount.empty()) GTEST_SKIP() << "no cgroup2 mount on this machine";
    absl::StatusOr<std::unique_ptr<CgroupV2>> cgroup =
        CgroupV2::Create(layout->v2_mount, {}, absl::StrCat(::getpid(), "-spawn-test"),
                         {.memory_bytes = 64 << 20, .pids = 64, .cpus = 1});
    ASSERT_TRUE(cgroup.ok()) << cgroup.status();
    cgroup_ = std::move(*cgroup);
    ASSERT_GE(cgroup_->clone_into_fd(), 0);
  }
  void TearDown() override {
    if (cgroup_) {
      EXPECT_TRUE(cgroup_->Destroy().ok());
    }
  }

  // Runs `argv` in a sandbox born in cgroup_ (and in `net`'s namespace when given) and returns
  // the result.
  absl::StatusOr<RunResult> Run(std::vector<std::string> argv,
                                const PreparedNetwork* net = nullptr) {
    HostContext host;
    host.home = "/nonexistent-home";
    absl::StatusOr<MountOptions> options = MountOptionsFor(Policy{}, host, std::nullopt);
    if (!options.ok()) return options.status();
    absl::StatusOr<MountPlan> mounts = MountPlan::Build(*options);
    if (!mounts.ok()) return mounts.status();
    absl::StatusOr<SeccompProgram> seccomp = SeccompProgram::Precompiled({});
    if (!seccomp.ok()) return seccomp.status();
    absl::StatusOr<IdMapping> ids = DefaultIdMapping();
    if (!ids.ok()) return ids.status();

    ContainPlan plan;
    plan.ids = *ids;
    plan.mounts = &*mounts;
    plan.rlimits = PlanRlimits(absl::Seconds(10));
    plan.last_cap = LastCapability();
    plan.argv_storage = std::move(argv);
    plan.env_storage = {"PATH=/usr/bin:/bin"};
    plan.search_path = "/usr/bin:/bin";
    plan.seccomp = seccomp->fprog();
    plan.seccomp_listener = seccomp->notifies();
    plan.Finalize();

    SpawnOptions spawn;
    if (net != nullptr) {
      if (!mounts->UseDetachedSysfs(net->sysfs.get())) {
        return absl::InternalError("the plan took no sysfs");
      }
      plan.loopback_ready = true;
      spawn.netns_fd = net->netns.get();
    }
    spawn.cgroup = cgroup_.get();
    spawn.make_cgroup = []() -> absl::StatusOr<Cgroup*> {
      ADD_FAILURE() << "the cgroup was given; nothing should be made after clone3";
      return absl::InternalError("unexpected");
    };
    absl::StatusOr<SandboxProcess> proc = SpawnSandbox(plan, spawn);
    if (!proc.ok()) return proc.status();
    SuperviseOptions watch;
    watch.wall_timeout = absl::Seconds(20);
    watch.arch = seccomp->arch();
    return Supervise(*proc, *cgroup_, watch);
  }

  std::unique_ptr<CgroupV2> cgroup_;
};

TEST_F(SpawnV2Test, ChildIsBornInItsCgroupAndIsAccounted) {
  // The CPU time comes from this cgroup's cpu.stat: it grows only if the sandbox ran inside it.
  // Inside, /proc/self/cgroup shows "/": the command sits at its cgroup namespace's root.
  absl::StatusOr<RunResult> r =
      Run({"/bin/sh", "-c",
           "grep '^0::' /proc/self/cgroup; i=0; while [ $i -lt 20000 ]; do "
           "i=$((i+1)); done; echo done"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kExited);
  EXPECT_EQ(r->stdout_text.text, "0::/\ndone\n");
  EXPECT_GT(r->cpu_seconds, 0.0);
}

// The path moat takes by default (netns_prep.h): born in a namespace made ahead, whose lo is up
// and whose sysfs is attached at /sys; the supervisor's thread is back in its own namespace.
TEST_F(SpawnV2Test, ChildIsBornInAPreparedNetworkNamespace) {
  absl::StatusOr<PreparedNetwork> net = PrepareNetwork();
  ASSERT_TRUE(net.ok()) << net.status();
  struct stat ns;
  ASSERT_EQ(::fstat(net->netns.get(), &ns), 0);
  struct stat own_before;
  ASSERT_EQ(::stat("/proc/thread-self/ns/net", &own_before), 0);
  absl::StatusOr<RunResult> r = Run({"/bin/sh", "-c",
                                     "readlink /proc/self/ns/net; ls /sys/class/net; "
                                     "cat /sys/class/net/lo/flags; cat /proc/net/dev | wc -l; "
                                     "grep -c ' /sys .*sysfs' /proc/self/mountinfo"},
                                    &*net);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, RunStatus::kExited) << r->stderr_text.text;
  // lo's flags: IFF_UP | IFF_LOOPBACK | IFF_RUNNING as sysfs prints them (0x9 plus running is
  // not shown there); /proc/net/dev: two header lines and lo.
  EXPECT_EQ(r->stdout_text.text, absl::StrCat("net:[", ns.st_ino, "]\nlo\n0x9\n3\n1\n"));
  struct stat own_after;
  ASSERT_EQ(::stat("/proc/thread-self/ns/net", &own_after), 0);
  EXPECT_EQ(own_after.st_ino, own_before.st_ino);
}

TEST_F(SpawnV2Test, ViolationsAreReportedThroughTheListener) {
  absl::StatusOr<RunResult> r = Run({"/usr/bin/unshare", "-U", "/bin/true"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->violations.empty());
  EXPECT_EQ(r->violations[0].kind, "seccomp");
  EXPECT_THAT(r->violations[0].detail, HasSubstr("unshare"));
}

}  // namespace
}  // namespace moat::sandbox
