#include "node-agent/api/code_interpreter.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::agent {
namespace {

using Kind = CodeFrame::Kind;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseCodeFrameTest, OutputIsAnEventWithItsTextCleaned) {
  CodeFrame frame = ParseCodeFrame(R"({"type": "stdout", "text": "\u001b[31mred\u001b[0m\n"})");
  EXPECT_EQ(frame.kind, Kind::kEvent);
  EXPECT_EQ(frame.event["type"], "stdout");
  // The JSON escape hid the colour from the first cleaning; it is cleaned after decoding.
  EXPECT_EQ(frame.event["text"], "red\n");
  EXPECT_EQ(ParseCodeFrame(R"({"type": "stderr", "text": "x"})").event["type"], "stderr");
  // Nothing left after cleaning: no event.
  EXPECT_TRUE(ParseCodeFrame(R"({"type": "stdout", "text": "\u001b[0m"})").event.is_null());
}

TEST(ParseCodeFrameTest, SecretsAreMaskedInEveryText) {
  const std::string key = "AKIAIOSFODNN7EXAMPLE";
  CodeFrame result =
      ParseCodeFrame(R"({"type": "result", "results": {"text": "')" + key + R"('"}})");
  EXPECT_EQ(result.kind, Kind::kEvent);
  EXPECT_THAT(result.event["results"]["text"].get<std::string>(), Not(HasSubstr(key)));
  CodeFrame error = ParseCodeFrame(R"({"type": "error", "error": {"ename": "E", "evalue": ")" +
                                   key + R"(", "traceback": ["a )" + key + R"("]}})");
  EXPECT_THAT(error.event.dump(), Not(HasSubstr(key)));
  EXPECT_THAT(error.event.dump(), HasSubstr("REDACTED"));
}

TEST(ParseCodeFrameTest, ErrorsCountsResultsAsExecdSendsThem) {
  CodeFrame error = ParseCodeFrame(
      R"({"type": "error", "error": {"ename": "NameError", "evalue": "name 'x' is not defined",)"
      R"( "traceback": ["Traceback (most recent call last):", "NameError: x"], "extra": 1}})");
  EXPECT_EQ(error.kind, Kind::kEvent);
  EXPECT_EQ(error.event, nlohmann::json::parse(R"({"type": "error", "error": {"ename": "NameError",
      "evalue": "name 'x' is not defined",
      "traceback": ["Traceback (most recent call last):", "NameError: x"]}})"));
  CodeFrame count = ParseCodeFrame(R"({"type": "execution_count", "execution_count": 3})");
  EXPECT_EQ(count.event,
            nlohmann::json::parse(R"({"type": "execution_count", "execution_count": 3})"));
  CodeFrame result =
      ParseCodeFrame(R"({"type": "result", "results": {"text": "42", "text/html": "<b>42</b>"}})");
  EXPECT_EQ(result.event["results"]["text/html"], "<b>42</b>");
}

TEST(ParseCodeFrameTest, DoneLostAndWhatIsNoFrame) {
  CodeFrame done = ParseCodeFrame(R"({"type": "done", "execution_time": 15})");
  EXPECT_EQ(done.kind, Kind::kDone);
  EXPECT_EQ(done.execution_time, 15);
  CodeFrame lost = ParseCodeFrame(R"({"type": "lost", "text": "[Errno 2] No such file"})");
  EXPECT_EQ(lost.kind, Kind::kLost);
  EXPECT_EQ(lost.text, "[Errno 2] No such file");
  for (const char* line : {"plain text", R"({"type": "stdout", "text": "cut)", "[1]",
                           R"({"type": 3})", R"({"type": "status", "text": "busy"})",
                           R"({"type": "execution_count", "execution_count": "1"})"}) {
    CodeFrame frame = ParseCodeFrame(line);
    EXPECT_EQ(frame.kind, Kind::kInvalid) << line;
    EXPECT_EQ(frame.text, line);
  }
}

// The server run by this host's python3 (it is plain Python; the sandbox adds nothing it relies
// on), one run of `code` sent over its socket as the client sends it, and the text of the run's
// stdout frames in order; "" when the server did not start.
std::string StdoutOfOneRun(const std::string& code) {
  char dir[] = "/tmp/moat-code-test-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return "";
  const std::string socket_path = std::string(dir) + "/s";
  const std::string socket_env = "MOAT_CODE_SOCKET=" + socket_path;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return "";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    char* const argv[] = {const_cast<char*>("python3"), const_cast<char*>("-c"),
                          const_cast<char*>(kCodeServerScript), nullptr};
    char* const envp[] = {const_cast<char*>(socket_env.c_str()),
                          const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
    ::execve("/usr/bin/python3", argv, envp);
    ::_exit(127);
  }
  ::close(out[1]);
  std::string ready;
  char c;
  while (ready.size() < kCodeServerReady.size() && ::read(out[0], &c, 1) == 1) ready += c;
  std::string text;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  const std::string request = nlohmann::json({{"code", code}}).dump() + "\n";
  if (ready == kCodeServerReady &&
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    // Up to the "done" frame, as the client reads (the server keeps the connection open).
    std::string data;
    char buf[4096];
    bool done = false;
    while (!done) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      data.append(buf, static_cast<size_t>(n));
      size_t end;
      while (!done && (end = data.find('\n')) != std::string::npos) {
        CodeFrame frame = ParseCodeFrame(absl::string_view(data).substr(0, end));
        if (frame.kind == Kind::kDone) done = true;
        if (frame.kind == Kind::kEvent && !frame.event.is_null() &&
            frame.event["type"] == "stdout") {
          text += frame.event["text"].get<std::string>();
        }
        data.erase(0, end + 1);
      }
    }
  }
  ::close(fd);
  ::close(out[0]);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::unlink(socket_path.c_str());
  ::rmdir(dir);
  return text;
}

// What the code or a process it starts writes to descriptor 1 is forwarded by a thread of the
// server, what it prints by the code's own sys.stdout: the order they were written in holds
// (before, the print usually overtook the forwarder, always under emulation).
TEST(CodeServerTest, WhatWentToTheDescriptorComesBeforeThePrintThatFollowsIt) {
  const std::string text = StdoutOfOneRun(
      "import os\n"
      "for i in range(20):\n"
      "    os.write(1, b'fd%d\\n' % i)\n"
      "    print('py%d' % i)\n"
      "os.system('echo from-a-child')\n"
      "print('after')\n");
  std::string want;
  for (int i = 0; i < 20; ++i) want += "fd" + std::to_string(i) + "\npy" + std::to_string(i) + "\n";
  EXPECT_EQ(text, want + "from-a-child\nafter\n");
}

}  // namespace
}  // namespace moat::agent
