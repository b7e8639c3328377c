#include "util/fd_passing.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/unique_fd.h"

namespace moat {
namespace {

class FdPassingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    a_.reset(sv[0]);
    b_.reset(sv[1]);
  }
  UniqueFd a_, b_;
};

// Several descriptors in one message arrive in order, close-on-exec, as the same files.
TEST_F(FdPassingTest, SeveralDescriptorsArriveInOrder) {
  int pipes[4][2];
  int sent[4];
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(::pipe2(pipes[i], O_CLOEXEC), 0);
    sent[i] = pipes[i][0];
  }
  ASSERT_TRUE(SendFds(a_.get(), sent, 4, 'N'));
  int got[kMaxPassedFds];
  ASSERT_EQ(ReceiveFds(b_.get(), 'N', got, kMaxPassedFds), 4);
  for (int i = 0; i < 4; ++i) {
    struct stat want, have;
    ASSERT_EQ(::fstat(sent[i], &want), 0);
    ASSERT_EQ(::fstat(got[i], &have), 0);
    EXPECT_EQ(want.st_ino, have.st_ino) << i;
    EXPECT_EQ(::fcntl(got[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    ::close(got[i]);
    ::close(pipes[i][0]);
    ::close(pipes[i][1]);
  }
}

// Another tag, or more than the receiver has room for: refused, and nothing of it stays open.
TEST_F(FdPassingTest, WrongTagOrTooManyIsRefusedAndClosed) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const int two[2] = {p[0], p[0]};
  for (char tag : {'X', 'N'}) {
    SCOPED_TRACE(tag);
    ASSERT_TRUE(SendFds(a_.get(), two, tag == 'X' ? 1 : 2, tag));
    int got[1] = {-1};
    errno = 0;
    EXPECT_EQ(ReceiveFds(b_.get(), 'N', got, 1), -1);
    EXPECT_EQ(errno, EPROTO);
  }
  ::close(p[0]);
  // Every copy received was closed: the pipe's read end is gone, so a write fails.
  ::signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(::write(p[1], "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  ::close(p[1]);
  EXPECT_FALSE(SendFds(a_.get(), two, kMaxPassedFds + 1, 'N'));
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(FdPassingTest, EndOfStreamIsEpipe) {
  a_.reset();
  int got[1];
  EXPECT_EQ(ReceiveFds(b_.get(), 'N', got, 1), -1);
  EXPECT_EQ(errno, EPIPE);
}

}  // namespace
}  // namespace moat
