#include "sandbox/rlimits.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace moat::sandbox {
namespace {

const RlimitSetting& Find(const std::vector<RlimitSetting>& plan, int resource) {
  for (const RlimitSetting& s : plan) {
    if (s.resource == resource) return s;
  }
  ADD_FAILURE() << "resource " << resource << " is not planned";
  static const RlimitSetting kNone{};
  return kNone;
}

TEST(CapAtHardLimitTest, LowersOnlyWhatIsAboveTheHardLimit) {
  struct rlimit capped = CapAtHardLimit({4096, 4096}, 1024);
  EXPECT_EQ(capped.rlim_cur, 1024u);
  EXPECT_EQ(capped.rlim_max, 1024u);
  capped = CapAtHardLimit({12, 13}, 1024);
  EXPECT_EQ(capped.rlim_cur, 12u);
  EXPECT_EQ(capped.rlim_max, 13u);
  capped = CapAtHardLimit({4096, 4096}, RLIM_INFINITY);
  EXPECT_EQ(capped.rlim_max, 4096u);
}

TEST(PlanRlimitsTest, PlansTheBackstops) {
  std::vector<RlimitSetting> plan = PlanRlimits(absl::Milliseconds(2500));
  EXPECT_EQ(Find(plan, RLIMIT_CORE).limit.rlim_max, 0u);
  struct rlimit files;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  EXPECT_EQ(Find(plan, RLIMIT_NOFILE).limit.rlim_cur, std::min<rlim_t>(4096, files.rlim_max));
  struct rlimit cpu;
  ASSERT_EQ(::getrlimit(RLIMIT_CPU, &cpu), 0);
  if (cpu.rlim_max == RLIM_INFINITY) {
    EXPECT_EQ(Find(plan, RLIMIT_CPU).limit.rlim_cur, 5u);  // ceil(2.5 s) + 2
    EXPECT_EQ(Find(plan, RLIMIT_CPU).limit.rlim_max, 6u);
  }
}

// Under a runtime whose hard open-files limit is below moat's (containerd's `ctr run` gives
// 1024), a process without CAP_SYS_RESOURCE (here: one in a user namespace of its own, which has
// none in the initial one) could not take the planned limit: every run failed to start. The exit
// status says which step failed.
[[noreturn]] void ApplyUnderALowHardLimit() {
  struct rlimit low = {512, 512};
  if (::setrlimit(RLIMIT_NOFILE, &low) != 0) ::_exit(2);
  if (::unshare(CLONE_NEWUSER) != 0) ::_exit(3);
  std::vector<RlimitSetting> plan = PlanRlimits(absl::Seconds(10));
  if (!ApplyRlimits(plan, STDERR_FILENO)) ::_exit(4);
  struct rlimit now;
  ::getrlimit(RLIMIT_NOFILE, &now);
  ::_exit(now.rlim_max == 512 ? 0 : 5);
}

TEST(PlanRlimitsTest, AppliesUnderAHardLimitBelowThePlannedOne) {
  EXPECT_EXIT(ApplyUnderALowHardLimit(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace moat::sandbox
