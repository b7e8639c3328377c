// The prepared network namespace, for real (needs root): a new namespace with lo up, a sysfs that
// shows it, and the calling thread back where it was.
#include "sandbox/netns/netns_prep.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
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

// What a thread that enters `netns` sees (setns is per thread): lo's flags, how many interfaces.
struct Interfaces {
  short lo_flags = 0;
  int count = 0;
};
Interfaces LookInside(int netns) {
  Interfaces seen;
  std::thread inside([&] {
    if (::setns(netns, CLONE_NEWNET) != 0) return;
    int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {};
    std::memcpy(ifr.ifr_name, "lo", 3);
    if (::ioctl(sock, SIOCGIFFLAGS, &ifr) == 0) seen.lo_flags = ifr.ifr_flags;
    ::close(sock);
    struct if_nameindex* names = ::if_nameindex();
    for (struct if_nameindex* n = names; n != nullptr && n->if_index != 0; ++n) ++seen.count;
    if (names != nullptr) ::if_freenameindex(names);
  });
  inside.join();
  return seen;
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

  const Interfaces inside = LookInside(net->netns.get());
  EXPECT_TRUE(inside.lo_flags & IFF_UP);
  EXPECT_EQ(inside.count, 1) << "only lo";
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
          [&](bool) -> absl::StatusOr<PreparedNetwork> {
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

// With a pool, the first preparation makes this run's namespace on its thread and then, once
// allowed, the next run's; the next preparation takes that one from the pool.
class NetnsPrepPoolTest : public NetnsPrepTest {
 protected:
  void SetUp() override {
    NetnsPrepTest::SetUp();
    if (IsSkipped()) return;
    char base[] = "/run/netns_prep_test.XXXXXX";
    ASSERT_NE(::mkdtemp(base), nullptr);
    base_ = base;
    pool_ = std::make_unique<NetnsPool>(base_ + "/netns", 2);
  }
  void TearDown() override {
    if (base_.empty()) return;
    const std::string dir = base_ + "/netns";
    if (DIR* d = ::opendir(dir.c_str())) {
      while (struct dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        const std::string entry = dir + "/" + e->d_name;
        ::umount2(entry.c_str(), MNT_DETACH);
        ::unlink(entry.c_str());
      }
      ::closedir(d);
    }
    ::umount2(dir.c_str(), MNT_DETACH);
    ::rmdir(dir.c_str());
    ::rmdir(base_.c_str());
  }

  // The inodes of the namespaces waiting in the pool.
  std::vector<ino_t> Waiting() const {
    std::vector<ino_t> inodes;
    const std::string dir = base_ + "/netns";
    if (DIR* d = ::opendir(dir.c_str())) {
      while (struct dirent* e = ::readdir(d)) {
        struct stat st;
        if (e->d_name[0] != '.' && ::stat((dir + "/" + e->d_name).c_str(), &st) == 0) {
          inodes.push_back(st.st_ino);
        }
      }
      ::closedir(d);
    }
    return inodes;
  }

  std::string base_;
  std::unique_ptr<NetnsPool> pool_;
};

TEST_F(NetnsPrepPoolTest, TheFirstRunFillsThePoolAndTheNextTakesFromIt) {
  ino_t first_ns = 0;
  {
    NetworkPreparation prep(nullptr, pool_.get());
    absl::SleepFor(absl::Milliseconds(50));  // the thread has begun by then
    absl::StatusOr<PreparedNetwork> net = prep.Take();
    ASSERT_TRUE(net.ok()) << net.status();
    EXPECT_EQ(prep.source(), NetworkPreparation::Source::kThread);
    first_ns = NetnsInode(net->netns.get());
    EXPECT_TRUE(Waiting().empty()) << "the pool's namespace waits for AllowRefill";
    prep.AllowRefill();
  }
  std::vector<ino_t> waiting = Waiting();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_NE(waiting[0], first_ns);

  NetworkPreparation next(nullptr, pool_.get());
  absl::StatusOr<PreparedNetwork> net = next.Take();
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ(next.source(), NetworkPreparation::Source::kPool);
  EXPECT_EQ(NetnsInode(net->netns.get()), waiting[0]);
  ASSERT_TRUE(net->sysfs.valid());
  next.AllowRefill();
  absl::SleepFor(absl::Milliseconds(50));
  std::vector<ino_t> refilled = Waiting();
  ASSERT_EQ(refilled.size(), 1u) << "refilled for the run after";
  EXPECT_NE(refilled[0], waiting[0]) << "a namespace is never handed out twice";
}

// A pooled namespace comes with what the thread's would have: lo up, and a sysfs showing it.
TEST_F(NetnsPrepTest, AdoptingANamespaceBringsLoUpAndMountsItsSysfs) {
  // A bare namespace, lo down, made on a thread of its own.
  UniqueFd bare;
  std::thread maker([&] {
    if (::unshare(CLONE_NEWNET) == 0) bare.reset(::open("/proc/thread-self/ns/net", O_RDONLY));
  });
  maker.join();
  ASSERT_TRUE(bare.valid());
  const ino_t bare_ino = NetnsInode(bare.get());
  const ino_t before = OwnNetnsInode();
  absl::StatusOr<PreparedNetwork> net = AdoptNetwork(std::move(bare));
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ(OwnNetnsInode(), before) << "the thread stayed in the adopted namespace";
  EXPECT_EQ(NetnsInode(net->netns.get()), bare_ino);
  EXPECT_TRUE(LookInside(net->netns.get()).lo_flags & IFF_UP);
  ASSERT_TRUE(net->sysfs.valid());
  struct stat st;
  EXPECT_EQ(::fstatat(net->sysfs.get(), "class/net/lo", &st, 0), 0) << strerror(errno);
}

// Nothing for the pool is made before AllowRefill (so that it cannot slow the sandbox's start),
// and it is made by the destructor's time.
TEST(NetworkPreparationTest, ThePoolsNamespaceIsMadeOnlyOnceAllowed) {
  NetnsPool pool("/nonexistent/moat-netns-pool-test", 2);  // never has one; Add fails quietly
  std::atomic<int> prepared{0};
  {
    NetworkPreparation prep(
        [&](bool) -> absl::StatusOr<PreparedNetwork> {
          ++prepared;
          return PreparedNetwork{};
        },
        nullptr, &pool);
    absl::SleepFor(absl::Milliseconds(50));
    absl::StatusOr<PreparedNetwork> net = prep.Take();
    ASSERT_TRUE(net.ok()) << net.status();
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(prepared, 1) << "only this run's, so far";
  }
  EXPECT_EQ(prepared, 2) << "and the pool's once the destructor allowed it";
}

}  // namespace
}  // namespace moat::sandbox
