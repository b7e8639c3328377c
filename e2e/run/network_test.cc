// Network and sockets: the host's unix sockets (path and abstract), its loopback and its other
// addresses are unreachable; the sandbox's own loopback works. Every host listener here is
// world-writable and accepts anyone, so that only the sandbox can keep a connection from arriving;
// the host side then checks that nothing arrived.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A listening socket on the host. Connected() says whether anyone connected since.
class HostListener {
 public:
  // A unix socket at `path` (abstract if `abstract`), mode 0777.
  static std::unique_ptr<HostListener> Unix(const std::string& name, bool abstract = false) {
    auto l = std::unique_ptr<HostListener>(new HostListener);
    l->fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + (abstract ? 1 : 0), name.data(), name.size());
    socklen_t len = offsetof(struct sockaddr_un, sun_path) + name.size() + (abstract ? 1 : 0);
    if (::bind(l->fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(l->fd_, 16) != 0) {
      ADD_FAILURE() << "bind/listen " << name << ": " << strerror(errno);
    }
    if (!abstract) {
      ::chmod(name.c_str(), 0777);
      l->path_ = name;
    }
    return l;
  }

  // A TCP or UDP socket on `address` (numeric), any port.
  static std::unique_ptr<HostListener> Inet(const std::string& address, int type) {
    auto l = std::unique_ptr<HostListener>(new HostListener);
    struct sockaddr_storage ss = {};
    socklen_t len;
    auto* in4 = reinterpret_cast<sockaddr_in*>(&ss);
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (::inet_pton(AF_INET, address.c_str(), &in4->sin_addr) == 1) {
      in4->sin_family = AF_INET;
      len = sizeof(*in4);
    } else {
      EXPECT_EQ(::inet_pton(AF_INET6, address.c_str(), &in6->sin6_addr), 1) << address;
      in6->sin6_family = AF_INET6;
      len = sizeof(*in6);
    }
    l->type_ = type;
    l->fd_ = ::socket(ss.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (::bind(l->fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
        (type == SOCK_STREAM && ::listen(l->fd_, 16) != 0) ||
        ::getsockname(l->fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      ADD_FAILURE() << "bind/listen " << address << ": " << strerror(errno);
    }
    l->port_ = ntohs(ss.ss_family == AF_INET ? in4->sin_port : in6->sin6_port);
    return l;
  }

  ~HostListener() {
    ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  bool Connected() {
    if (type_ == SOCK_DGRAM) {
      char buf[64];
      return ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT) >= 0;
    }
    int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return false;
    ::close(conn);
    return true;
  }
  int port() const { return port_; }

 private:
  HostListener() = default;
  int fd_ = -1;
  int type_ = SOCK_STREAM;
  int port_ = 0;
  std::string path_;
};

class NetworkTest : public E2eTest {
 protected:
  // Runs net_probe with `args` and expects it to report `what` as blocked, nothing escaped.
  nlohmann::json Probe(const std::vector<std::string>& args, const std::string& what,
                       const std::vector<std::string>& flags = {}) {
    std::vector<std::string> command = {Attack("net_probe")};
    command.insert(command.end(), args.begin(), args.end());
    nlohmann::json r = RunJson(flags, command);
    if (!r.is_object()) return r;
    EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << "ATTACK SUCCEEDED\n"
                                                                           << Describe(r);
    EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr(absl::StrCat("blocked ", what)))
        << Describe(r);
    return r;
  }
};

TEST_F(NetworkTest, HostUnixSocketIsUnreachable) {
  auto host = HostListener::Unix(dir().Path("host.sock"));
  Probe({"unix", dir().Path("host.sock")}, "unix");
  EXPECT_FALSE(host->Connected()) << "ATTACK SUCCEEDED: a connection reached the host socket";
}

TEST_F(NetworkTest, HostUnixSocketInTheWorkspaceIsUnreachable) {
  TempDir ws;
  ASSERT_EQ(::chown(ws.path().c_str(), 65534, 65534), 0);
  auto host = HostListener::Unix(ws.Path("agent.sock"));
  Probe({"unix", "/workspace/agent.sock"}, "unix", {"--workspace", ws.path()});
  EXPECT_FALSE(host->Connected()) << "ATTACK SUCCEEDED: a connection reached the host socket";
}

// moat finds host sockets in /proc/net/unix, which shows the path as the server passed it to
// bind(): relative for a relative bind.
TEST_F(NetworkTest, HostSocketBoundByRelativePathIsUnreachable) {
  // Known limit (docs/security.md): path sockets are covered from /proc/net/unix when the run
  // starts; closing this needs Landlock's LANDLOCK_ACCESS_FS_RESOLVE_UNIX (Linux 7.x), which moat
  // will use where the kernel has it. The attack is kept so that it runs again then.
  GTEST_SKIP() << "known limit: a socket bound by a relative path is listed without its directory "
                  "in /proc/net/unix, so moat cannot cover it";
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(::chdir(dir().path().c_str()), 0);
  auto host = HostListener::Unix("relative.sock");
  ASSERT_EQ(::chdir(cwd), 0);
  ::chmod(dir().Path("relative.sock").c_str(), 0777);
  Probe({"unix", dir().Path("relative.sock")}, "unix");
  EXPECT_FALSE(host->Connected()) << "ATTACK SUCCEEDED: connected to a host socket bound by a "
                                     "relative path (not hidden)";
  ::unlink(dir().Path("relative.sock").c_str());
}

// /proc/net/unix separates fields by spaces and does not quote paths.
TEST_F(NetworkTest, HostSocketWithASpaceInItsPathIsUnreachable) {
  auto host = HostListener::Unix(dir().Path("my agent.sock"));
  Probe({"unix", dir().Path("my agent.sock")}, "unix");
  EXPECT_FALSE(host->Connected()) << "ATTACK SUCCEEDED: connected to a host socket whose path "
                                     "has a space (not hidden)";
}

// /proc/net/unix lists only the sockets of moat's own network namespace; a container's or another
// sandbox's socket on a shared file system is not in it.
TEST_F(NetworkTest, HostSocketOfAnotherNetworkNamespaceIsUnreachable) {
  // Known limit (docs/security.md): path sockets are covered from /proc/net/unix when the run
  // starts; closing this needs Landlock's LANDLOCK_ACCESS_FS_RESOLVE_UNIX (Linux 7.x), which moat
  // will use where the kernel has it. The attack is kept so that it runs again then.
  GTEST_SKIP() << "known limit: sockets bound in another network namespace are not listed in the "
                  "host /proc/net/unix";
  const std::string path = dir().Path("other-netns.sock");
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  pid_t server = ::fork();
  if (server == 0) {
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(3);
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 4) != 0)
      ::_exit(3);
    ::chmod(path.c_str(), 0777);
    (void)!::write(ready[1], "r", 1);
    char c;
    (void)!::read(go[0], &c, 1);
    int conn = ::accept(fd, nullptr, nullptr);
    ::_exit(conn >= 0 ? 1 : 0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the server in its own network namespace did not start";
  Probe({"unix", path}, "unix");
  (void)!::write(go[1], "g", 1);
  int status = 0;
  ::waitpid(server, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "ATTACK SUCCEEDED: connected to a host socket bound in "
                                       "another network namespace (not hidden)";
  ::unlink(path.c_str());
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
}

// Host sockets are hidden by a list made when the sandbox starts.
TEST_F(NetworkTest, HostSocketCreatedDuringTheRunIsUnreachable) {
  // Known limit (docs/security.md): path sockets are covered from /proc/net/unix when the run
  // starts; closing this needs Landlock's LANDLOCK_ACCESS_FS_RESOLVE_UNIX (Linux 7.x), which moat
  // will use where the kernel has it. The attack is kept so that it runs again then.
  GTEST_SKIP() << "known limit: a socket bound on the host after the sandbox started is not in the "
                  "list moat covers";
  TempDir signal_dir;
  ASSERT_EQ(::chown(signal_dir.path().c_str(), 65534, 65534), 0);
  const std::string path = dir().Path("late.sock");
  MoatProcess moat(
      {"run", "--json", "--workspace", signal_dir.path(), "--", "/bin/sh", "-c",
       absl::StrCat("touch /workspace/ready; while [ ! -e '", path, "' ]; do sleep 0.05; done; ",
                    Attack("net_probe"), " unix '", path, "'")},
      {});
  ASSERT_TRUE(Eventually([&] { return PathExists(signal_dir.Path("ready")); }, 10));
  auto host = HostListener::Unix(path);
  MoatResult r = moat.Wait();
  EXPECT_THAT(r.out, Not(HasSubstr("ESCAPED"))) << r.out;
  EXPECT_FALSE(host->Connected()) << "ATTACK SUCCEEDED: connected to a host socket created after "
                                     "the sandbox started\n"
                                  << r.out;
}

TEST_F(NetworkTest, HostAbstractSocketIsUnreachable) {
  const std::string name = UniqueMarker("moat-e2e-abstract");
  auto host = HostListener::Unix(name, /*abstract=*/true);
  Probe({"abstract", name}, "abstract: ECONNREFUSED");
  EXPECT_FALSE(host->Connected()) << "ATTACK SUCCEEDED: a connection reached the host socket";
}

TEST_F(NetworkTest, HostLoopbackServersAreUnreachable) {
  for (const char* address : {"127.0.0.1", "::1"}) {
    auto host = HostListener::Inet(address, SOCK_STREAM);
    Probe({"tcp", address, std::to_string(host->port())}, "tcp");
    EXPECT_FALSE(host->Connected()) << "ATTACK SUCCEEDED: reached the host's " << address;
    auto udp = HostListener::Inet(address, SOCK_DGRAM);
    RunJson({}, {Attack("net_probe"), "udp", address, std::to_string(udp->port())});
    EXPECT_FALSE(udp->Connected()) << "ATTACK SUCCEEDED: a datagram reached the host's " << address;
  }
}

TEST_F(NetworkTest, HostExternalAddressesAndTheInternetAreUnreachable) {
  auto host = HostListener::Inet("0.0.0.0", SOCK_STREAM);
  std::vector<std::string> targets = {"1.1.1.1", "169.254.169.254", "10.0.0.1"};
  struct ifaddrs* ifs = nullptr;
  ASSERT_EQ(::getifaddrs(&ifs), 0);
  for (struct ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                sizeof(text));
    if (std::string(text).rfind("127.", 0) != 0) targets.push_back(text);
  }
  ::freeifaddrs(ifs);
  for (const std::string& target : targets) {
    SCOPED_TRACE(target);
    Probe({"tcp", target, std::to_string(host->port())}, "tcp");
  }
  EXPECT_FALSE(host->Connected()) << "ATTACK SUCCEEDED: reached the host's listener";
}

TEST_F(NetworkTest, OnlyLoopbackExistsAndItWorks) {
  nlohmann::json ifs = RunJson({}, {Attack("net_probe"), "interfaces"});
  ASSERT_TRUE(ifs.is_object());
  EXPECT_EQ(ifs["stdout"], "interface lo\n") << Describe(ifs);
  nlohmann::json lo = RunJson({}, {Attack("net_probe"), "loopback"});
  ASSERT_TRUE(lo.is_object());
  EXPECT_EQ(lo["exit_code"], 0) << Describe(lo);
  EXPECT_THAT(lo["stdout"].get<std::string>(), HasSubstr("ok loopback server")) << Describe(lo);
}

TEST_F(NetworkTest, NetworkConfigurationIsRefused) {
  if (!PathExists("/usr/sbin/ip") && !PathExists("/sbin/ip") && !PathExists("/usr/bin/ip")) {
    GTEST_SKIP() << "no ip(8) on this host";
  }
  nlohmann::json r =
      RunJson({}, Sh("PATH=/usr/sbin:/sbin:/usr/bin:/bin\n"
                     "ip link add moate2e0 type dummy 2>/dev/null && echo 'ESCAPED add link'\n"
                     "ip addr add 10.99.99.99/32 dev lo 2>/dev/null && echo 'ESCAPED add address'\n"
                     "ip route add 10.98.0.0/16 dev lo 2>/dev/null && echo 'ESCAPED add route'\n"
                     "ip link set lo down 2>/dev/null && echo 'ESCAPED lo down'\n"
                     "ip -o link | wc -l\n"));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
  EXPECT_EQ(r["stdout"], "1\n") << Describe(r);
}

// Every run gets a network namespace that no sandbox used before (netns_pool.h hands each one
// out once): nothing of an earlier run's traffic shows in the next, neither its connections
// (TIME_WAIT lasts a minute) nor lo's packet counters.
TEST_F(NetworkTest, NothingOfAnEarlierRunsNetworkShowsInTheNext) {
  const std::string show = "grep 'lo:' /proc/net/dev; tail -q -n +2 /proc/net/tcp /proc/net/tcp6";
  // The lo line's received bytes, and the sockets listed after it.
  auto parse = [](const std::string& out, uint64_t* rx_bytes, std::string* sockets) {
    const size_t eol = out.find('\n');
    const std::string lo = out.substr(0, eol);
    *rx_bytes = std::strtoull(lo.substr(lo.find(':') + 1).c_str(), nullptr, 10);
    *sockets = eol == std::string::npos ? "" : out.substr(eol + 1);
  };
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    nlohmann::json earlier =
        RunJson({}, Sh(absl::StrCat(Attack("net_probe"), " loopback >/dev/null; ", show)));
    ASSERT_TRUE(earlier.is_object());
    uint64_t rx = 0;
    std::string sockets;
    parse(earlier["stdout"], &rx, &sockets);
    // The control: the traffic and the connection show in the run that made them.
    ASSERT_GT(rx, 0u) << Describe(earlier);
    ASSERT_THAT(sockets, HasSubstr("0100007F")) << Describe(earlier);

    nlohmann::json next = RunJson({}, Sh(show));
    ASSERT_TRUE(next.is_object());
    parse(next["stdout"], &rx, &sockets);
    EXPECT_EQ(rx, 0u) << "lo counted an earlier run's traffic\n" << Describe(next);
    EXPECT_EQ(sockets, "") << "an earlier run's connection is listed\n" << Describe(next);
  }
}

// /run holds the host's sockets (D-Bus, Docker, systemd, databases): empty inside, with /var/run.
TEST_F(NetworkTest, HostRunDirectoryIsEmpty) {
  nlohmann::json r = RunJson({}, Sh("ls -A /run /var/run/ 2>&1; echo end"));
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, HasSubstr("end")) << Describe(r);
  for (const char* name : {"dbus", "docker.sock", "systemd", "postgresql", "containerd"}) {
    EXPECT_THAT(out, Not(HasSubstr(name))) << Describe(r);
  }
}

TEST_F(NetworkTest, HostSystemVIpcIsInvisible) {
  // A message queue, shared memory segment and semaphore set on the host, open to everyone.
  const key_t key =
      static_cast<key_t>(0x6d000000 | (std::hash<std::string>()(UniqueMarker("k")) & 0xffffff));
  int q = ::msgget(key, IPC_CREAT | 0666);
  int shm = ::shmget(key, 4096, IPC_CREAT | 0666);
  int sem = ::semget(key, 1, IPC_CREAT | 0666);
  ASSERT_GE(q, 0);
  nlohmann::json r = RunJson({}, {Attack("misc_probe"), "sysv", std::to_string(key)});
  ::msgctl(q, IPC_RMID, nullptr);
  if (shm >= 0) ::shmctl(shm, IPC_RMID, nullptr);
  if (sem >= 0) ::semctl(sem, 0, IPC_RMID);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["exit_code"], 0) << Describe(r);
  for (const char* call : {"msgget", "shmget", "semget"}) {
    EXPECT_THAT(r["stdout"].get<std::string>(),
                HasSubstr(absl::StrCat("blocked ", call, ": ENOENT")))
        << Describe(r);
  }
}

}  // namespace
}  // namespace moat::e2e
