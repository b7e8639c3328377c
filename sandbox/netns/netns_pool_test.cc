// The network namespace pool, for real (needs root): namespaces pinned by bind mounts in a
// private directory, each handed out once, whoever asks and however many ask at once.
#include "sandbox/netns/netns_pool.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/netns/netns_prep.h"

namespace moat::sandbox {
namespace {

namespace fs = std::filesystem;

ino_t Inode(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

// A fresh network namespace of this process's user namespace, as the preparation makes one.
UniqueFd NewNamespace() {
  absl::StatusOr<PreparedNetwork> net = PrepareNetwork();
  EXPECT_TRUE(net.ok()) << net.status();
  return net.ok() ? std::move(net->netns) : UniqueFd();
}

// Mount points at or under `dir` in this process's mount table.
std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> found;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 && (fields[4] == dir || fields[4].rfind(dir + "/", 0) == 0)) {
      found.push_back(fields[4]);
    }
  }
  return found;
}

class NetnsPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces and mounts need root";
    char base[] = "/run/netns_pool_test.XXXXXX";
    ASSERT_NE(::mkdtemp(base), nullptr) << strerror(errno);
    base_ = base;
    dir_ = base_ + "/netns";
  }
  void TearDown() override {
    if (base_.empty()) return;
    for (int round = 0; round < 3; ++round) {
      std::vector<std::string> mounts = MountsUnder(dir_);
      for (auto it = mounts.rbegin(); it != mounts.rend(); ++it) {
        ::umount2(it->c_str(), MNT_DETACH);
      }
    }
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  size_t Entries() const {
    std::error_code ec;
    size_t n = 0;
    for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      ++n;
    }
    return n;
  }

  std::string base_;
  std::string dir_;
};

TEST_F(NetnsPoolTest, AnEmptyOrMissingPoolHasNothing) {
  NetnsPool pool(dir_, 2);
  EXPECT_EQ(pool.Take().status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  EXPECT_EQ(pool.Take().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(NetnsPoolTest, HandsOutWhatWasAddedOnceAndLeavesNothingBehind) {
  NetnsPool pool(dir_, 2);
  UniqueFd made = NewNamespace();
  ASSERT_TRUE(made.valid());
  absl::StatusOr<bool> added = pool.Add(made.get());
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_TRUE(*added);
  EXPECT_EQ(Entries(), 1u);

  absl::StatusOr<UniqueFd> taken = pool.Take();
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(Inode(taken->get()), Inode(made.get())) << "the namespace that was added";
  EXPECT_EQ(pool.Take().status().code(), absl::StatusCode::kNotFound) << "handed out twice";
  EXPECT_EQ(Entries(), 0u);
  EXPECT_THAT(MountsUnder(dir_), ::testing::ElementsAre(dir_)) << "only the pool's own mount";
}

TEST_F(NetnsPoolTest, TheDirectoryIsRootsAloneAndAPrivateMount) {
  NetnsPool pool(dir_, 1);
  UniqueFd made = NewNamespace();
  ASSERT_TRUE(pool.Add(made.get()).ok());
  struct stat st;
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, 0u);
  // Private: the mount's optional fields carry no "shared:" or "master:" tag.
  std::ifstream in("/proc/self/mountinfo");
  bool seen = false;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() < 7 || fields[4] != dir_) continue;
    seen = true;
    EXPECT_THAT(line, ::testing::Not(::testing::HasSubstr("shared:")));
    EXPECT_THAT(line, ::testing::Not(::testing::HasSubstr("master:")));
  }
  EXPECT_TRUE(seen) << dir_ << " is not a mount point";
}

// A maker that died between binding the directory on itself and making it private left a shared
// mount: the next Add makes it private.
TEST_F(NetnsPoolTest, APoolDirectoryLeftSharedIsMadePrivate) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  ASSERT_EQ(::mount(dir_.c_str(), dir_.c_str(), nullptr, MS_BIND, nullptr), 0);
  ASSERT_EQ(::mount(nullptr, dir_.c_str(), nullptr, MS_SHARED, nullptr), 0);
  auto propagation = [&] {
    std::ifstream in("/proc/self/mountinfo");
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ');
      if (fields.size() > 6 && fields[4] == dir_) return fields[6];
    }
    return std::string("not mounted");
  };
  ASSERT_THAT(propagation(), ::testing::HasSubstr("shared:"));
  NetnsPool pool(dir_, 1);
  UniqueFd made = NewNamespace();
  ASSERT_TRUE(*pool.Add(made.get()));
  EXPECT_EQ(propagation(), "-") << "no propagation tags: private";
}

TEST_F(NetnsPoolTest, RefusesADirectoryOthersCanEnter) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  NetnsPool pool(dir_, 1);
  UniqueFd made = NewNamespace();
  absl::StatusOr<bool> added = pool.Add(made.get());
  EXPECT_EQ(added.status().code(), absl::StatusCode::kFailedPrecondition) << added.status();
  EXPECT_EQ(Entries(), 0u);
}

TEST_F(NetnsPoolTest, KeepsNoMoreThanItsCapacity) {
  NetnsPool pool(dir_, 2);
  std::vector<UniqueFd> made;
  for (int i = 0; i < 3; ++i) made.push_back(NewNamespace());
  EXPECT_TRUE(*pool.Add(made[0].get()));
  EXPECT_TRUE(*pool.Add(made[1].get()));
  absl::StatusOr<bool> third = pool.Add(made[2].get());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_FALSE(*third);
  EXPECT_EQ(Entries(), 2u);
}

TEST_F(NetnsPoolTest, RefusesToAddWhatIsNotANetworkNamespace) {
  NetnsPool pool(dir_, 2);
  UniqueFd uts(::open("/proc/self/ns/uts", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(pool.Add(uts.get()).status().code(), absl::StatusCode::kInvalidArgument);
}

// Whatever else sits in the directory is never handed out: a plain file, another kind of
// namespace, and a network namespace owned by another user namespace (whose root could
// configure it).
TEST_F(NetnsPoolTest, SkipsEntriesThatAreNotOurNetworkNamespaces) {
  NetnsPool pool(dir_, 8);
  UniqueFd made = NewNamespace();
  ASSERT_TRUE(*pool.Add(made.get()));  // creates the directory
  ASSERT_TRUE(pool.Take().ok());

  std::ofstream(dir_ + "/1-plain");
  const std::string uts = dir_ + "/1-uts";
  std::ofstream(uts.c_str());
  ASSERT_EQ(::mount("/proc/self/ns/uts", uts.c_str(), nullptr, MS_BIND, nullptr), 0);

  // A child in a new user namespace makes a network namespace there and waits.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char ok = ::unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  const std::string foreign = dir_ + "/1-foreign";
  std::ofstream(foreign.c_str());
  const std::string child_net = absl::StrCat("/proc/", child, "/ns/net");
  ASSERT_EQ(::mount(child_net.c_str(), foreign.c_str(), nullptr, MS_BIND, nullptr), 0)
      << strerror(errno);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);

  EXPECT_EQ(pool.Take().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Entries(), 3u) << "what is not ours is left alone";
}

TEST_F(NetnsPoolTest, RemovesEmptyEntriesOfDeadMakersOnly) {
  NetnsPool pool(dir_, 4);
  UniqueFd first = NewNamespace();
  ASSERT_TRUE(*pool.Add(first.get()));
  // A maker that died between creating its entry and mounting on it (no such pid: beyond
  // pid_max), and one that is alive (this process) and may be about to mount.
  std::ofstream(dir_ + "/2147483646-dead");
  const std::string alive = absl::StrCat(dir_, "/", ::getpid(), "-busy");
  std::ofstream(alive.c_str());
  UniqueFd second = NewNamespace();
  ASSERT_TRUE(*pool.Add(second.get()));
  EXPECT_FALSE(fs::exists(dir_ + "/2147483646-dead"));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_EQ(Entries(), 3u);
}

// Many takers at once, in threads of one process (the claim is a umount of a shared mount, so
// threads race exactly as processes do): every namespace goes to exactly one of them.
TEST_F(NetnsPoolTest, ConcurrentTakersNeverGetTheSameNamespace) {
  constexpr int kWaiting = 6;
  constexpr int kTakers = 12;
  NetnsPool pool(dir_, kWaiting);
  std::set<ino_t> added;
  for (int i = 0; i < kWaiting; ++i) {
    UniqueFd made = NewNamespace();
    ASSERT_TRUE(*pool.Add(made.get()));
    added.insert(Inode(made.get()));
  }
  std::vector<ino_t> got(kTakers, 0);
  std::atomic<bool> go{false};
  std::vector<std::thread> takers;
  for (int i = 0; i < kTakers; ++i) {
    takers.emplace_back([&, i] {
      while (!go) {
      }
      absl::StatusOr<UniqueFd> taken = pool.Take();
      if (taken.ok()) got[i] = Inode(taken->get());
    });
  }
  go = true;
  for (std::thread& t : takers) t.join();
  std::multiset<ino_t> handed;
  for (ino_t ino : got) {
    if (ino != 0) handed.insert(ino);
  }
  EXPECT_EQ(handed.size(), static_cast<size_t>(kWaiting));
  EXPECT_EQ(std::set<ino_t>(handed.begin(), handed.end()), added) << "each exactly once";
  EXPECT_EQ(Entries(), 0u);
}

}  // namespace
}  // namespace moat::sandbox
