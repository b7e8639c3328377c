// Streams that lose nothing (issue 11): the real agent and sandboxes, execd's SSE read by clients
// of different speeds over loopback. A live reader holds its command (the command blocks on a
// full pipe, as under OpenSandbox's execd) instead of losing lines; a reader that goes lets the
// command go on; a command nobody reads is never held and its output stays bounded.
#include <httplib.h>
#include <sys/socket.h>

#include <cstdio>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "e2e/agent/agent_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

class StreamTest : public OneSandboxTest {
 protected:
  StreamTest() : OneSandboxTest("/usr/bin/seq") {}

  // POST /command with `body`; `on_event` gets each event and returns false to hang up. `pace`
  // runs after each piece the client receives (a slow client sleeps there).
  int Stream(const nlohmann::json& body, const std::function<bool(const nlohmann::json&)>& on_event,
             const std::function<void(size_t received)>& pace = nullptr) {
    std::unique_ptr<httplib::Client> client = agent_->NewClient();
    client->set_read_timeout(60);
    // A small receive buffer, fixed (no autotuning, which grows to tcp_rmem's 32 MB): what the
    // client has not read stays in the agent, not in the kernel.
    client->set_socket_options([](int fd) {
      int bytes = 64 << 10;
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    });
    std::string buffer;
    size_t received = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = absl::StrCat("/v1/sandboxes/", id_, "/execd/command");
    req.headers = {{"X-EXECD-ACCESS-TOKEN", token_}, {"Content-Type", "application/json"}};
    req.body = body.dump();
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      buffer.append(data, len);
      received += len;
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
        std::string event = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (!absl::StartsWith(event, "data: ")) continue;
        nlohmann::json e = nlohmann::json::parse(event.substr(6), nullptr, false);
        if (e.is_object() && !on_event(e)) return false;
      }
      if (pace) pace(received);
      return true;
    };
    httplib::Response res;
    httplib::Error err;
    return client->send(req, res, err) ? res.status : 0;
  }

  // GET /command/status/<id> until it has finished, for up to `wait`; its last answer.
  nlohmann::json StatusWhenDone(const std::string& command_id, absl::Duration wait) {
    std::unique_ptr<httplib::Client> client = agent_->NewClient();
    nlohmann::json status;
    for (absl::Time give_up = absl::Now() + wait; absl::Now() < give_up;) {
      httplib::Result r =
          client->Get(absl::StrCat("/v1/sandboxes/", id_, "/execd/command/status/", command_id),
                      httplib::Headers{{"X-EXECD-ACCESS-TOKEN", token_}});
      if (r && r->status == 200) {
        status = nlohmann::json::parse(r->body, nullptr, false);
        if (status.is_object() && !status.value("running", true)) return status;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return status;
  }
};

// A client slower than the command gets every line, in order: the agent holds the command once
// the client is 1 MiB (max_log_bytes) behind instead of dropping the oldest lines.
TEST_F(StreamTest, ASlowClientGetsEveryLineInOrder) {
  // 16000 lines of 1000 bytes (seq's numbers, zero-padded): 16 MB, far more than the agent
  // keeps and the agent's socket send buffer (tcp_wmem, 4 MB) together.
  constexpr int kLines = 16000;
  std::string expected, got, errors;
  for (int i = 1; i <= kLines; ++i) {
    const std::string n = std::to_string(i);
    absl::StrAppend(&expected, std::string(999 - n.size(), '0'), n, "\n");
  }
  int lines = 0;
  bool completed = false;
  const absl::Time start = absl::Now();
  const int status = Stream(
      {{"command", absl::StrCat("seq -f %0999.0f 1 ", kLines)}},
      [&](const nlohmann::json& e) {
        const std::string type = e.value("type", "");
        if (type == "stdout") {
          ++lines;
          absl::StrAppend(&got, e.value("text", ""), "\n");
        }
        if (type == "stderr") errors += e.value("text", "");
        if (type == "execution_complete") completed = true;
        return true;
      },
      [&](size_t received) {
        // At most 8 MB/s: slower than seq and the agent's cleaning and framing.
        const absl::Time due = start + absl::Seconds(static_cast<double>(received) / 8e6);
        if (absl::Now() < due) absl::SleepFor(due - absl::Now());
      });
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(completed);
  EXPECT_EQ(errors, "");  // no "[moat: N bytes dropped]"
  EXPECT_EQ(lines, kLines);
  EXPECT_TRUE(got == expected) << "the lines differ from seq's; got " << got.size() << " bytes";
}

// agent_bench's stream: 10 MiB of 64-byte lines read as fast as the client can, every line there.
TEST_F(StreamTest, AFastClientGetsEveryLineOf10MiB) {
  int lines = 0;
  const absl::Time start = absl::Now();
  const int status = Stream({{"command",
                              "yes 012345678901234567890123456789012345678901234567890"
                              "123456789012 | head -c 10485760"}},
                            [&](const nlohmann::json& e) {
                              if (e.value("type", "") == "stdout") ++lines;
                              return true;
                            });
  EXPECT_EQ(status, 200);
  EXPECT_EQ(lines, 163840);
  // For the record, not asserted (timings are noisy on a shared machine).
  std::fprintf(stderr, "10 MiB streamed in %.0f ms\n",
               absl::ToDoubleMilliseconds(absl::Now() - start));
}

// A client that hangs up while the command is held must not leave it held: it runs to its end
// (its output then kept as for a command nobody reads).
TEST_F(StreamTest, AClientThatHangsUpLetsTheCommandFinish) {
  std::string command_id;
  size_t stdout_events = 0;
  Stream({{"command", "seq 1 3000000"}},  // 23 MB: held long before its end
         [&](const nlohmann::json& e) {
           if (e.value("type", "") == "init") command_id = e.value("text", "");
           if (e.value("type", "") == "stdout") ++stdout_events;
           return stdout_events < 20000;  // then hang up
         });
  ASSERT_FALSE(command_id.empty());
  nlohmann::json status = StatusWhenDone(command_id, absl::Seconds(60));
  EXPECT_FALSE(status.value("running", true))
      << "still held after its client left: " << status.dump();
  EXPECT_EQ(status.value("exit_code", -1), 0) << status.dump();
  httplib::Result logs = agent_->NewClient()->Get(
      absl::StrCat("/v1/sandboxes/", id_, "/execd/command/", command_id, "/logs"),
      httplib::Headers{{"X-EXECD-ACCESS-TOKEN", token_}});
  ASSERT_TRUE(logs);
  EXPECT_TRUE(absl::EndsWith(logs->body, "\n3000000\n")) << logs->body.substr(0, 200);
}

// Nobody reads a background command: it is never held (it finishes at its own speed) and only
// the newest 1 MiB of its output is kept, the rest said to be dropped.
TEST_F(StreamTest, ABackgroundCommandNobodyReadsIsNeverHeldAndStaysBounded) {
  std::string command_id;
  Stream({{"command", "seq 1 2000000"}, {"background", true}}, [&](const nlohmann::json& e) {
    if (e.value("type", "") == "init") command_id = e.value("text", "");
    return true;
  });
  ASSERT_FALSE(command_id.empty());
  nlohmann::json status = StatusWhenDone(command_id, absl::Seconds(60));
  EXPECT_FALSE(status.value("running", true)) << status.dump();
  EXPECT_EQ(status.value("exit_code", -1), 0) << status.dump();
  httplib::Result logs = agent_->NewClient()->Get(
      absl::StrCat("/v1/sandboxes/", id_, "/execd/command/", command_id, "/logs"),
      httplib::Headers{{"X-EXECD-ACCESS-TOKEN", token_}});
  ASSERT_TRUE(logs);
  EXPECT_THAT(logs->body, ::testing::StartsWith("[moat: "));
  EXPECT_THAT(logs->body.substr(0, 60), ::testing::HasSubstr(" bytes dropped]\n"));
  EXPECT_TRUE(absl::EndsWith(logs->body, "\n2000000\n"));
  EXPECT_LE(logs->body.size(), (1u << 20) + 64);
}

}  // namespace
}  // namespace moat::e2e
