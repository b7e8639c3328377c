#include "node-agent/probe/mount_watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace moat::agent::probe {
namespace {

using Kind = MountChange::Kind;

constexpr char kRoot[] = "20 1 0:5 / / ro,relatime - overlay overlay ro";
constexpr char kTmp[] = "21 20 0:6 / /tmp rw,nosuid - tmpfs tmpfs rw";
constexpr char kTmpRemounted[] = "21 20 0:6 / /tmp ro,nosuid - tmpfs tmpfs ro";
constexpr char kHost[] = "35 20 8:1 /home /workspace rw - ext4 /dev/sda1 rw";

TEST(DiffMountTablesTest, SameTableHasNoChanges) {
  const std::string text = std::string(kRoot) + "\n" + kTmp + "\n";
  EXPECT_TRUE(DiffMountTables(ParseMountTable(text), ParseMountTable(text)).empty());
}

TEST(DiffMountTablesTest, ReportsAppearedDisappearedAndChanged) {
  const MountTable before = ParseMountTable(std::string(kRoot) + "\n" + kTmp + "\n");
  const MountTable after = ParseMountTable(std::string(kTmpRemounted) + "\n" + kHost + "\n");
  const std::vector<MountChange> changes = DiffMountTables(before, after);
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].kind, Kind::kDisappeared);
  EXPECT_EQ(changes[0].before, kRoot);
  EXPECT_EQ(changes[1].kind, Kind::kChanged);
  EXPECT_EQ(changes[1].Describe(), std::string("changed: ") + kTmp + " -> " + kTmpRemounted);
  EXPECT_EQ(changes[2].kind, Kind::kAppeared);
  EXPECT_EQ(changes[2].Describe(), std::string("appeared: ") + kHost);
}

// After a DaemonSet rollout the kubelet deletes the old pod's directory, and the binds the
// sandbox inherited from the agent's container (/etc/hosts) show their root as deleted. The mount
// is unchanged; only a change beyond that suffix counts.
TEST(DiffMountTablesTest, ABindWhoseSourceTheHostDeletedIsNoChange) {
  constexpr char kHosts[] =
      "189 188 254:0 /kubelet/pods/728a/etc-hosts /etc/hosts ro,nosuid,nodev,relatime - ext4 "
      "/dev/vda rw";
  constexpr char kHostsDeleted[] =
      "189 188 254:0 /kubelet/pods/728a/etc-hosts//deleted /etc/hosts ro,nosuid,nodev,relatime - "
      "ext4 /dev/vda rw";
  constexpr char kHostsDeletedAndRw[] =
      "189 188 254:0 /kubelet/pods/728a/etc-hosts//deleted /etc/hosts rw,nosuid,nodev,relatime - "
      "ext4 /dev/vda rw";
  constexpr char kOtherFile[] =
      "189 188 254:0 /kubelet/pods/728a/etc-hostsx//deleted /etc/hosts ro,nosuid,nodev,relatime - "
      "ext4 /dev/vda rw";
  const MountTable before = ParseMountTable(kHosts);
  EXPECT_TRUE(DiffMountTables(before, ParseMountTable(kHostsDeleted)).empty());
  EXPECT_EQ(DiffMountTables(before, ParseMountTable(kHostsDeletedAndRw)).size(), 1u);
  EXPECT_EQ(DiffMountTables(before, ParseMountTable(kOtherFile)).size(), 1u);
}

TEST(MountWatchTest, ReportsEachChangeOnce) {
  char path[] = "/tmp/mount_watch_test.XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path) << kRoot << "\n";
  auto watch = MountWatch::Start(path);
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_TRUE(watch->Check()->empty());
  std::ofstream(path) << kRoot << "\n" << kHost << "\n";
  auto changes = watch->Check();
  ASSERT_TRUE(changes.ok());
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ((*changes)[0].kind, Kind::kAppeared);
  EXPECT_TRUE(watch->Check()->empty());
  ::unlink(path);
  EXPECT_FALSE(watch->Check().ok());
  EXPECT_FALSE(MountWatch::Start(path).ok());
}

}  // namespace
}  // namespace moat::agent::probe
