#include "sandbox/egress/sk_lookup.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "gtest/gtest.h"
#include "sandbox/egress/netns_sockets.h"
#include "sandbox/netns/net.h"
#include "sandbox/values/ip_address.h"

namespace moat::egress {
namespace {

// Connects to address:port; returns the connected socket or -1 with errno.
int Dial(const char* address, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, address, &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof(sa)) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// In a fresh network namespace (on a thread of its own): connections to any port of 127.77/16
// reach the one listener, which sees the address and port the client dialled; others do not.
TEST(SkLookupSteeringTest, EveryPortOfTheRangeReachesTheListener) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace and BPF)";
  std::thread worker([] {
    ASSERT_EQ(::unshare(CLONE_NEWNET), 0);
    ASSERT_TRUE(sandbox::BringUpLoopbackInThisThread().ok());
    absl::StatusOr<UniqueFd> listener = ListenTcp(IpAddress::V4(0x7f000001), 0);
    ASSERT_TRUE(listener.ok()) << listener.status();
    UniqueFd netns(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(netns.valid());
    absl::StatusOr<SkLookupSteering> steering =
        SkLookupSteering::Attach(netns.get(), listener->get(), 0x7f4d0000, 0xffff0000);
    ASSERT_TRUE(steering.ok()) << steering.status();
    const int flags = ::fcntl(listener->get(), F_GETFL);
    ::fcntl(listener->get(), F_SETFL, flags & ~O_NONBLOCK);

    for (uint16_t port : {80, 4242, 65000}) {
      int client = Dial("127.77.3.9", port);
      ASSERT_GE(client, 0) << "port " << port << ": " << strerror(errno);
      int accepted = ::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC);
      ASSERT_GE(accepted, 0);
      struct sockaddr_in local = {};
      socklen_t length = sizeof(local);
      ASSERT_EQ(::getsockname(accepted, reinterpret_cast<struct sockaddr*>(&local), &length), 0);
      char text[INET_ADDRSTRLEN];
      EXPECT_STREQ(::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)), "127.77.3.9");
      EXPECT_EQ(ntohs(local.sin_port), port);
      ::close(accepted);
      ::close(client);
    }
    // Outside the range nothing is steered: nothing listens there.
    EXPECT_EQ(Dial("127.0.0.1", 4242), -1);
    EXPECT_EQ(errno, ECONNREFUSED);
    EXPECT_EQ(Dial("127.78.0.1", 4242), -1);
    EXPECT_EQ(errno, ECONNREFUSED);
  });
  worker.join();
}

}  // namespace
}  // namespace moat::egress
