// The prepared network namespace, for real (needs root): a new namespace with lo up, a sysfs that
// shows it, and the calling thread back where it was.
#include "sandbox/netns_prep.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"

namespace moat::sandbox {
namespace {

using ::testing::ElementsAre;

ino_t NetnsInode(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

ino_t OwnNetnsInode() {
  struct stat st;
  return ::stat("/proc/thread-self/ns/net", &st) == 0 ? st.st_ino : 0;
}

class NetnsPrepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "making a network namespace needs root";
  }
};

TEST_F(NetnsPrepTest, MakesANamespaceWithLoUpAndLeavesTheThreadWhereItWas) {
  const ino_t before = OwnNetnsInode();
  absl::StatusOr<PreparedNetwork> net = PrepareNetwork();
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ(OwnNetnsInode(), before) << "the thread stayed in the new namespace";
  ASSERT_TRUE(net->netns.valid());
  EXPECT_NE(NetnsInode(net->netns.get()), before);

  // Look at lo from inside, on a thread of its own (setns is per thread).
  short flags = 0;
  int interfaces = 0;
  std::thread inside([&] {
    if (::setns(net->netns.get(), CLONE_NEWNET) != 0) return;
    int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {};
    std::memcpy(ifr.ifr_name, "lo", 3);
    if (::ioctl(sock, SIOCGIFFLAGS, &ifr) == 0) flags = ifr.ifr_flags;
    ::close(sock);
    struct if_nameindex* names = ::if_nameindex();
    for (struct if_nameindex* n = names; n != nullptr && n->if_index != 0; ++n) ++interfaces;
    if (names != nullptr) ::if_freenameindex(names);
  });
  inside.join();
  EXPECT_TRUE(flags & IFF_UP);
  EXPECT_EQ(interfaces, 1) << "only lo";
}

TEST_F(NetnsPrepTest, ItsSysfsShowsThatNamespaceReadOnly) {
  absl::StatusOr<PreparedNetwork> net = PrepareNetwork();
  ASSERT_TRUE(net.ok()) << net.status();
  ASSERT_TRUE(net->sysfs.valid());
  int dir_fd = ::openat(net->sysfs.get(), "class/net", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0) << strerror(errno);
  DIR* dir = ::fdopendir(dir_fd);
  ASSERT_NE(dir, nullptr);
  std::vector<std::string> devices;
  while (struct dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') devices.push_back(e->d_name);
  }
  ::closedir(dir);
  EXPECT_THAT(devices, ElementsAre("lo")) << "the host's interfaces would show here otherwise";
  // Read-only: lo's mtu is writable by root on a writable sysfs.
  int fd = ::openat(net->sysfs.get(), "class/net/lo/mtu", O_WRONLY | O_CLOEXEC);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EROFS);
  if (fd >= 0) ::close(fd);
}

TEST_F(NetnsPrepTest, PreparationRunsOnAThreadThenItsFollowUp) {
  std::atomic<bool> followed{false};
  auto prep = std::make_unique<NetworkPreparation>([&] { followed = true; });
  absl::SleepFor(absl::Milliseconds(50));  // the thread has begun by then
  absl::StatusOr<PreparedNetwork> net = prep->Take();
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_TRUE(net->netns.valid());
  EXPECT_EQ(prep->Take().status().code(), absl::StatusCode::kFailedPrecondition);  // once only
  prep.reset();  // joins: the follow-up has run by now
  EXPECT_TRUE(followed);
  // Destroyed without Take(): joins and closes what it made.
  NetworkPreparation untaken;
}

// Whoever comes first does the work: Take() before the thread has begun gets Unavailable at once,
// and then the thread prepares nothing (but still does its follow-up). Which one wins each time is
// the scheduler's choice; every outcome must be one of the two.
TEST(NetworkPreparationTest, TakeBeforeTheThreadBeginsClaimsTheWork) {
  int stolen = 0;
  for (int i = 0; i < 200; ++i) {
    std::atomic<int> prepared{0};
    std::atomic<bool> followed{false};
    bool taken_over = false;
    {
      NetworkPreparation prep(
          [&]() -> absl::StatusOr<PreparedNetwork> {
            ++prepared;
            return PreparedNetwork{};
          },
          [&] { followed = true; });
      absl::StatusOr<PreparedNetwork> net = prep.Take();
      if (!net.ok()) {
        EXPECT_EQ(net.status().code(), absl::StatusCode::kUnavailable);
        taken_over = true;
        ++stolen;
      }
      EXPECT_EQ(prep.Take().status().code(), absl::StatusCode::kFailedPrecondition);
    }  // joined: the thread is done
    EXPECT_EQ(prepared, taken_over ? 0 : 1) << "prepared exactly when not taken over";
    EXPECT_TRUE(followed) << "the follow-up runs either way";
  }
  std::cout << stolen << " of 200 taken over before the thread began\n";
}

}  // namespace
}  // namespace moat::sandbox
