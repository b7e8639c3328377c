// Terminal injection: no TIOCSTI anywhere, no controlling terminal, no host terminal device, and
// no escape sequence from the sandbox reaches the terminal moat runs in.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kStiAttempts[] = {"TIOCSTI fd0", "TIOCSTI fd1", "TIOCSTI fd2",
                                        "TIOCSTI high bits fd0", "TIOCLINUX fd0"};

TEST_F(E2eTest, TiocstiFailsOnEveryDescriptorAndIsReported) {
  nlohmann::json r = RunJson({}, {Attack("tty_probe")});
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_EQ(r["exit_code"], 0) << Describe(r);
  EXPECT_THAT(out, Not(HasSubstr("ESCAPED"))) << Describe(r);
  for (const char* what : kStiAttempts) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("blocked ", what, ": EPERM"))) << Describe(r);
  }
  EXPECT_THAT(out, HasSubstr("blocked TIOCSTI own pty: EPERM")) << Describe(r);
  for (const char* dev : {"/dev/tty", "/dev/console", "/dev/tty0"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("blocked open ", dev, ": "))) << Describe(r);
  }
  EXPECT_THAT(out, HasSubstr("blocked controlling tty fd0: ENOTTY")) << Describe(r);
  EXPECT_THAT(out, HasSubstr("ok no foreign terminal in /dev/pts")) << Describe(r);
  EXPECT_TRUE(HasViolation(r, "seccomp", "ioctl(TIOCSTI)")) << Describe(r);
}

// moat in a real terminal, as a person would run it: nothing may be pushed into that terminal's
// input, and escape sequences (window title, clipboard via OSC 52, screen clearing) are removed.
class PtyTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(::openpty(&master_, &slave_, nullptr, nullptr, nullptr), 0);
    struct termios t;
    ASSERT_EQ(::tcgetattr(slave_, &t), 0);
    ::cfmakeraw(&t);  // any injected byte becomes readable at once, without a newline
    ASSERT_EQ(::tcsetattr(slave_, TCSANOW, &t), 0);
    options_.stdin_fd = slave_;
    options_.stdout_fd = slave_;
    options_.stderr_fd = slave_;
  }
  void TearDown() override {
    if (master_ >= 0) ::close(master_);
    if (slave_ >= 0) ::close(slave_);
  }

  // What moat wrote to the terminal.
  std::string Screen() {
    std::string s;
    char buf[4096];
    struct pollfd p = {master_, POLLIN, 0};
    while (::poll(&p, 1, 50) == 1) {
      ssize_t n = ::read(master_, buf, sizeof(buf));
      if (n <= 0) break;
      s.append(buf, n);
    }
    return s;
  }
  // What is waiting in the terminal's input queue (what a shell reading it would get).
  std::string PendingInput() {
    ::fcntl(slave_, F_SETFL, ::fcntl(slave_, F_GETFL) | O_NONBLOCK);
    std::string s;
    char buf[256];
    ssize_t n;
    while ((n = ::read(slave_, buf, sizeof(buf))) > 0) s.append(buf, n);
    return s;
  }

  int master_ = -1;
  int slave_ = -1;
  MoatOptions options_;
};

TEST_F(PtyTest, NothingIsInjectedIntoTheCallersTerminal) {
  MoatResult r = RunPlain({}, {Attack("tty_probe")}, options_);
  std::string screen = Screen();
  EXPECT_EQ(r.exit_code, 0) << screen;
  EXPECT_THAT(screen, HasSubstr("blocked TIOCSTI fd0")) << screen;
  EXPECT_THAT(screen, Not(HasSubstr("ESCAPED"))) << screen;
  EXPECT_EQ(PendingInput(), "") << "ATTACK SUCCEEDED: bytes were pushed into the terminal's input";
}

TEST_F(PtyTest, EscapeSequencesDoNotReachTheTerminal) {
  const char* script =
      "printf 'before\\033]0;pwned-title\\007\\033]52;c;cHduZWQ=\\007\\033[2J\\033[31mred\\033[0m"
      "\\033P+q544e\\033\\\\after\\n'\n"
      "printf 'err\\033]0;pwned-err\\007\\n' >&2\n";
  MoatResult r = RunPlain({}, Sh(script), options_);
  std::string screen = Screen();
  EXPECT_EQ(r.exit_code, 0) << screen;
  EXPECT_THAT(screen, HasSubstr("before")) << screen;
  EXPECT_THAT(screen, HasSubstr("red")) << screen;
  EXPECT_THAT(screen, HasSubstr("after")) << screen;
  EXPECT_THAT(screen, HasSubstr("err")) << screen;
  EXPECT_EQ(screen.find('\033'), std::string::npos) << "ATTACK SUCCEEDED: ESC reached the terminal";
  EXPECT_EQ(screen.find('\007'), std::string::npos) << "BEL reached the terminal";
  EXPECT_THAT(screen, Not(HasSubstr("pwned"))) << screen;
  EXPECT_THAT(screen, Not(HasSubstr("cHduZWQ="))) << "an OSC 52 clipboard payload got through";
  EXPECT_EQ(PendingInput(), "");
}

}  // namespace
}  // namespace moat::e2e
