// Layout detection, planning, request validation and the factory (sandbox/cgroup.h); no root.
#include "sandbox/cgroup/cgroup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "sandbox/testing/fake_cgroup_tree.h"

namespace moat::sandbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using Kind = CgroupLayout::Kind;

// The real /proc/self/mountinfo of the development VM: v1 controllers each on their own
// hierarchy (cpu and cpuacct NOT co-mounted) and a cgroup2 mount with no controllers.
constexpr char kHybridMountinfo[] = R"(22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334432k,nr_inodes=3083608,mode=755
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683652k
26 24 0:24 / /dev/pts rw,relatime - devpts devpts rw,mode=600,ptmxmode=000
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
28 27 0:25 / /mnt/sandboxing/model_tools_env/v1/python ro,nosuid,nodev,relatime - tmpfs model_tools_unavailable ro,size=4k,mode=755
29 26 0:26 / /dev/pts rw,relatime - devpts devpts rw,mode=600,ptmxmode=000
30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683652k
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
)";

// A systemd machine in unified mode.
constexpr char kV2Mountinfo[] =
    R"(21 26 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
30 21 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
31 21 0:27 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:10 - pstore pstore rw
)";

// A legacy (v1 only) machine, with co-mounted controllers and optional fields.
constexpr char kV1Mountinfo[] =
    R"(18 60 0:17 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw
22 18 0:19 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:7 - tmpfs tmpfs ro,mode=755
23 22 0:20 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:8 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
26 22 0:23 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
27 22 0:24 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,memory
28 22 0:25 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,net_cls,net_prio
29 22 0:26 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,pids
30 22 0:27 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,freezer
60 1 253:0 / / rw,relatime shared:1 - xfs /dev/mapper/root rw,attr2,inode64,noquota
)";

TEST(ParseCgroupMountinfoTest, HybridOfThisMachine) {
  absl::StatusOr<CgroupLayout> layout = ParseCgroupMountinfo(kHybridMountinfo);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->kind, Kind::kHybrid);
  EXPECT_EQ(layout->v2_mount, "/sys/fs/cgroup/unified");
  EXPECT_EQ(layout->v1_mounts.at("cpu"), "/sys/fs/cgroup/cpu");
  EXPECT_EQ(layout->v1_mounts.at("cpuacct"), "/sys/fs/cgroup/cpuacct");
  EXPECT_EQ(layout->v1_mounts.at("memory"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(layout->v1_mounts.at("pids"), "/sys/fs/cgroup/pids");
  EXPECT_EQ(layout->v1_mounts.at("freezer"), "/sys/fs/cgroup/freezer");
  EXPECT_FALSE(layout->v1_mounts.contains("name=systemd"));
  EXPECT_FALSE(layout->v1_mounts.contains("rw"));
  // Every hierarchy, those whose controllers moat does not use and the named one included.
  EXPECT_THAT(
      layout->v1_hierarchies,
      ElementsAre("/sys/fs/cgroup/blkio", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
                  "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/devices", "/sys/fs/cgroup/freezer",
                  "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/systemd"));
  EXPECT_EQ(layout->Describe(),
            "hybrid (v1: blkio,cpu,cpuacct,cpuset,devices,freezer,memory,pids; v2: "
            "/sys/fs/cgroup/unified)");
}

TEST(ParseCgroupMountinfoTest, PureV2) {
  absl::StatusOr<CgroupLayout> layout = ParseCgroupMountinfo(kV2Mountinfo);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->kind, Kind::kV2);
  EXPECT_EQ(layout->v2_mount, "/sys/fs/cgroup");
  EXPECT_THAT(layout->v1_mounts, IsEmpty());
  EXPECT_THAT(layout->v1_hierarchies, IsEmpty());
  EXPECT_EQ(layout->Describe(), "v2 (/sys/fs/cgroup)");
}

TEST(ParseCgroupMountinfoTest, PureV1WithCoMountedControllers) {
  absl::StatusOr<CgroupLayout> layout = ParseCgroupMountinfo(kV1Mountinfo);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->kind, Kind::kV1);
  EXPECT_EQ(layout->v2_mount, "");
  EXPECT_THAT(layout->v1_mounts, ElementsAre(Pair("cpu", "/sys/fs/cgroup/cpu,cpuacct"),
                                             Pair("cpuacct", "/sys/fs/cgroup/cpu,cpuacct"),
                                             Pair("freezer", "/sys/fs/cgroup/freezer"),
                                             Pair("memory", "/sys/fs/cgroup/memory"),
                                             Pair("net_cls", "/sys/fs/cgroup/net_cls,net_prio"),
                                             Pair("net_prio", "/sys/fs/cgroup/net_cls,net_prio"),
                                             Pair("pids", "/sys/fs/cgroup/pids")));
  EXPECT_EQ(layout->Describe(), "v1 (cpu,cpuacct,freezer,memory,net_cls,net_prio,pids)");
  EXPECT_THAT(layout->v1_hierarchies,
              ElementsAre("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/freezer",
                          "/sys/fs/cgroup/memory", "/sys/fs/cgroup/net_cls,net_prio",
                          "/sys/fs/cgroup/pids", "/sys/fs/cgroup/systemd"));
}

TEST(ParseCgroupMountinfoTest, DecodesEscapedMountPoints) {
  absl::StatusOr<CgroupLayout> layout = ParseCgroupMountinfo(
      "40 1 0:38 / /run/my\\040cgroups\\134x rw,relatime - cgroup2 cgroup2 rw\n");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->v2_mount, "/run/my cgroups\\x");
}

TEST(ParseCgroupMountinfoTest, IgnoresMountsHiddenByALaterMount) {
  // cgroup2 at /sys/fs/cgroup, then a tmpfs over it with v1 hierarchies inside (a container
  // runtime doing this leaves the v2 mount unreachable).
  absl::StatusOr<CgroupLayout> layout = ParseCgroupMountinfo(
      "30 21 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
      "31 21 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
      "32 31 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->kind, Kind::kV1);
  EXPECT_EQ(layout->v2_mount, "");
  EXPECT_EQ(layout->v1_mounts.at("memory"), "/sys/fs/cgroup/memory");
}

TEST(ParseCgroupMountinfoTest, PrefersSysFsCgroupWhenMountedTwice) {
  absl::StatusOr<CgroupLayout> layout = ParseCgroupMountinfo(
      "40 1 0:38 / /run/other rw - cgroup2 cgroup2 rw\n"
      "41 1 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
      "42 1 0:39 / /mnt/mem rw - cgroup cgroup rw,memory\n"
      "43 1 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->v2_mount, "/sys/fs/cgroup");
  EXPECT_EQ(layout->v1_mounts.at("memory"), "/sys/fs/cgroup/memory");
  EXPECT_THAT(layout->v1_hierarchies, ElementsAre("/sys/fs/cgroup/memory"));  // one hierarchy
}

TEST(ParseCgroupMountinfoTest, NoCgroupMountSaysWhatToDo) {
  absl::StatusOr<CgroupLayout> layout =
      ParseCgroupMountinfo("26 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n");
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(layout.status().message(), HasSubstr("mount -t cgroup2"));
}

TEST(ParseCgroupMountinfoTest, RejectsMalformedLines) {
  EXPECT_EQ(ParseCgroupMountinfo("garbage line\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCgroupMountinfo("1 2 0:1 / /x rw cgroup2 cgroup2 rw\n").status().code(),
            absl::StatusCode::kInvalidArgument);  // no "-" separator
}

TEST(DetectCgroupLayoutTest, ReadsFixtureAndV2Controllers) {
  testing::FakeCgroupTree tree;
  const std::string mount = tree.AddV2Mount("cgroup", "cpuset cpu io memory pids");
  absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout(tree.WriteMountinfo());
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->kind, Kind::kV2);
  EXPECT_EQ(layout->v2_mount, mount);
  EXPECT_THAT(layout->v2_controllers, ElementsAre("cpu", "cpuset", "io", "memory", "pids"));
  EXPECT_EQ(layout->Describe(), "v2 (" + mount + " with cpu,cpuset,io,memory,pids)");
}

TEST(ChooseV2ParentTest, WithoutSystemdTheMountItself) {
  EXPECT_EQ(ChooseV2Parent("/sys/fs/cgroup", {.own_cgroup = "/x", .own_delegated = true}).value(),
            "/sys/fs/cgroup");
}

TEST(ChooseV2ParentTest, UnderSystemdTheDelegatedUnitOfThisProcess) {
  const V2Placement agent = {
      .systemd = true, .own_cgroup = "/system.slice/moat-agent.service", .own_delegated = true};
  EXPECT_EQ(ChooseV2Parent("/sys/fs/cgroup", agent).value(),
            "/sys/fs/cgroup/system.slice/moat-agent.service");
  // Not delegated (e.g. a login session's scope): nothing sanctioned below; the mount, as before.
  EXPECT_EQ(ChooseV2Parent("/sys/fs/cgroup",
                           {.systemd = true, .own_cgroup = "/user.slice/session-1.scope"})
                .value(),
            "/sys/fs/cgroup");
  // Delegated root (moat is systemd's container payload): the mount.
  EXPECT_EQ(
      ChooseV2Parent("/sys/fs/cgroup", {.systemd = true, .own_cgroup = "/", .own_delegated = true})
          .value(),
      "/sys/fs/cgroup");
}

TEST(ChooseV2ParentTest, ARequestedParentWinsAndIsChecked) {
  const V2Placement agent = {.requested = "/moat.slice/",
                             .systemd = true,
                             .own_cgroup = "/system.slice/moat-agent.service",
                             .own_delegated = true};
  EXPECT_EQ(ChooseV2Parent("/sys/fs/cgroup", agent).value(), "/sys/fs/cgroup/moat.slice");
  EXPECT_EQ(ChooseV2Parent("/sys/fs/cgroup", {.requested = "/"}).value(), "/sys/fs/cgroup");
  for (const char* bad : {"moat.slice", "/a/../..", "/./x"}) {
    absl::StatusOr<std::string> parent = ChooseV2Parent("/sys/fs/cgroup", {.requested = bad});
    EXPECT_EQ(parent.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parent.status().message(), HasSubstr("MOAT_CGROUP_PARENT")) << bad;
  }
}

TEST(ChooseV2ParentTest, ThePlanAndTheDescriptionUseTheParent) {
  CgroupLayout layout{.kind = Kind::kV2,
                      .v2_mount = "/sys/fs/cgroup",
                      .v2_parent = "/sys/fs/cgroup/system.slice/moat-agent.service",
                      .v2_controllers = {"cpu", "memory", "pids"}};
  absl::StatusOr<CgroupPlan> plan = PlanCgroup(layout);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->v2_mount, "/sys/fs/cgroup/system.slice/moat-agent.service");
  EXPECT_EQ(layout.Describe(),
            "v2 (/sys/fs/cgroup, moat in /sys/fs/cgroup/system.slice/moat-agent.service with "
            "cpu,memory,pids)");
}

TEST(DetectCgroupLayoutTest, MissingFileNamesIt) {
  absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout("/nonexistent/mountinfo");
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(layout.status().message(), HasSubstr("\"/nonexistent/mountinfo\""));
}

TEST(DetectCgroupLayoutTest, ThisMachine) {
  absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout();
  ASSERT_TRUE(layout.ok()) << layout.status();
  // The kind agrees with what was found, whatever the machine.
  switch (layout->kind) {
    case Kind::kV1:
      EXPECT_FALSE(layout->v1_mounts.empty());
      EXPECT_EQ(layout->v2_mount, "");
      break;
    case Kind::kV2:
      EXPECT_TRUE(layout->v1_mounts.empty());
      EXPECT_NE(layout->v2_mount, "");
      break;
    case Kind::kHybrid:
      EXPECT_FALSE(layout->v1_mounts.empty());
      EXPECT_NE(layout->v2_mount, "");
      break;
  }
  std::cout << "cgroup layout of this machine: " << layout->Describe() << "\n";
}

CgroupLayout HybridLayout() { return *ParseCgroupMountinfo(kHybridMountinfo); }

TEST(PlanCgroupTest, HybridOfThisMachineUsesV1Only) {
  absl::StatusOr<CgroupPlan> plan = PlanCgroup(HybridLayout());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(
      plan->v1,
      ElementsAre(Pair("cpu", "/sys/fs/cgroup/cpu"), Pair("cpuacct", "/sys/fs/cgroup/cpuacct"),
                  Pair("freezer", "/sys/fs/cgroup/freezer"),
                  Pair("memory", "/sys/fs/cgroup/memory"), Pair("pids", "/sys/fs/cgroup/pids")));
  EXPECT_FALSE(plan->uses_v2());
}

TEST(PlanCgroupTest, PureV2) {
  CgroupLayout layout = *ParseCgroupMountinfo(kV2Mountinfo);
  layout.v2_controllers = {"cpu", "io", "memory", "pids"};
  absl::StatusOr<CgroupPlan> plan = PlanCgroup(layout);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->uses_v1());
  EXPECT_EQ(plan->v2_mount, "/sys/fs/cgroup");
  EXPECT_THAT(plan->v2_controllers, ElementsAre("cpu", "memory", "pids"));
}

TEST(PlanCgroupTest, PureV2MissingControllerNamesItAndSaysWhatToDo) {
  CgroupLayout layout = *ParseCgroupMountinfo(kV2Mountinfo);
  layout.v2_controllers = {"cpu", "memory"};
  absl::StatusOr<CgroupPlan> plan = PlanCgroup(layout);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr("controller \"pids\""));
  EXPECT_THAT(plan.status().message(), HasSubstr("\"/sys/fs/cgroup/cgroup.controllers\""));
  EXPECT_THAT(plan.status().message(), HasSubstr("cgroup.subtree_control"));
  EXPECT_THAT(plan.status().message(), HasSubstr("CONFIG_CGROUP_PIDS"));
}

TEST(PlanCgroupTest, HybridSplitsControllersBetweenHierarchies) {
  // cpu and cpuacct on v1, memory and pids only on v2.
  CgroupLayout layout{.kind = Kind::kHybrid,
                      .v2_mount = "/sys/fs/cgroup/unified",
                      .v1_mounts = {{"cpu", "/sys/fs/cgroup/cpu,cpuacct"},
                                    {"cpuacct", "/sys/fs/cgroup/cpu,cpuacct"},
                                    {"freezer", "/sys/fs/cgroup/freezer"}},
                      .v2_controllers = {"memory", "pids"}};
  absl::StatusOr<CgroupPlan> plan = PlanCgroup(layout);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->v1, ElementsAre(Pair("cpu", "/sys/fs/cgroup/cpu,cpuacct"),
                                    Pair("cpuacct", "/sys/fs/cgroup/cpu,cpuacct")));
  EXPECT_EQ(plan->v2_mount, "/sys/fs/cgroup/unified");
  EXPECT_THAT(plan->v2_controllers, ElementsAre("memory", "pids"));
}

TEST(PlanCgroupTest, CpuTimeFromV2WhenCpuacctIsMissing) {
  CgroupLayout layout = HybridLayout();
  layout.v1_mounts.erase("cpuacct");
  absl::StatusOr<CgroupPlan> plan = PlanCgroup(layout);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->v2_mount, "/sys/fs/cgroup/unified");
  EXPECT_THAT(plan->v2_controllers, IsEmpty());  // only its cpu.stat is needed
  EXPECT_FALSE(plan->v1.contains("cpuacct"));
  EXPECT_FALSE(plan->v1.contains("freezer"));  // v2 kills
}

TEST(PlanCgroupTest, V1WithoutCpuacctOrV2NamesCpuacct) {
  CgroupLayout layout = *ParseCgroupMountinfo(kV1Mountinfo);
  layout.v1_mounts.erase("cpuacct");
  absl::StatusOr<CgroupPlan> plan = PlanCgroup(layout);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr("controller \"cpuacct\""));
  EXPECT_THAT(plan.status().message(), HasSubstr("mount -t cgroup -o cpuacct"));
}

TEST(PlanCgroupTest, V1WithoutFreezerStillWorks) {
  CgroupLayout layout = *ParseCgroupMountinfo(kV1Mountinfo);
  layout.v1_mounts.erase("freezer");
  absl::StatusOr<CgroupPlan> plan = PlanCgroup(layout);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->v1.contains("freezer"));
  EXPECT_TRUE(plan->v1.contains("pids"));
}

constexpr CgroupLimits kLimits{.memory_bytes = 64 << 20, .pids = 32, .cpus = 1.5};

TEST(ValidateCgroupRequestTest, AcceptsGoodRequest) {
  EXPECT_TRUE(ValidateCgroupRequest("1234-abc_def.1", kLimits).ok());
  EXPECT_TRUE(ValidateCgroupRequest("x", {.memory_bytes = 1, .pids = 1, .cpus = 0.01}).ok());
}

TEST(ValidateCgroupRequestTest, RejectsBadNames) {
  for (const char* name : {"", ".", "..", "a/b", "../x", "with space", "tab\t", "ü"}) {
    absl::Status status = ValidateCgroupRequest(name, kLimits);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(status.message(), HasSubstr("invalid cgroup name")) << name;
  }
  EXPECT_FALSE(ValidateCgroupRequest(std::string(201, 'a'), kLimits).ok());
}

TEST(ValidateCgroupRequestTest, RejectsBadLimits) {
  CgroupLimits limits = kLimits;
  limits.memory_bytes = 0;
  EXPECT_THAT(ValidateCgroupRequest("x", limits).message(), HasSubstr("memory"));
  limits = kLimits;
  limits.pids = 0;
  EXPECT_THAT(ValidateCgroupRequest("x", limits).message(), HasSubstr("pids"));
  for (double cpus : {0.0, 0.005, -1.0, std::nan(""), 1e9}) {
    limits = kLimits;
    limits.cpus = cpus;
    EXPECT_THAT(ValidateCgroupRequest("x", limits).message(), HasSubstr("CPU")) << cpus;
  }
}

TEST(CgroupCreateTest, FailsBeforeTouchingAnythingWhenAControllerIsMissing) {
  testing::FakeCgroupTree tree;
  const std::string mount = tree.AddV2Mount("cgroup", "cpu memory");
  absl::StatusOr<CgroupLayout> layout = DetectCgroupLayout(tree.WriteMountinfo());
  ASSERT_TRUE(layout.ok()) << layout.status();
  absl::StatusOr<std::unique_ptr<Cgroup>> cgroup = Cgroup::Create(*layout, "1-x", kLimits);
  EXPECT_THAT(cgroup.status().message(), HasSubstr("\"pids\""));
  EXPECT_FALSE(std::filesystem::exists(mount + "/moat"));
  EXPECT_EQ(testing::FakeCgroupTree::Read(mount + "/cgroup.subtree_control"), "");
}

}  // namespace
}  // namespace moat::sandbox
