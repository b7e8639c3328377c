// The per-sandbox API over real HTTP on 127.0.0.1 (an ephemeral port), with the fake backend;
// long-running commands are FakeBackend process scripts.
#include "node-agent/api/execd_api.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "node-agent/api/api_json.h"
#include "node-agent/api/http_api.h"
#include "node-agent/backend/fake_backend.h"
#include "node-agent/testing/expect_error.h"
#include "util/testing/spoiled_json.h"

namespace moat::agent {
namespace {

using ::moat::agent::testing::ExpectError;

using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kNodeToken[] = "node-token-0123456789abcdef";
constexpr uint64_t kMaxBody = 64 * 1024;
constexpr uint64_t kMaxUpload = 1 << 20;
constexpr char kFakeAwsKey[] = "AKIAIOSFODNN7EXAMPLE";  // The documented example shape.

AgentConfig TestConfig() {
  AgentConfig config;
  config.token_file = "/unused";
  config.max_request_bytes = kMaxBody;
  config.default_ttl = absl::Minutes(10);
  config.max_ttl = absl::Hours(1);
  ProfileConfig profile;
  profile.name = "default";
  profile.limits = Limits{2, 1 << 30, 512, 1 << 30};
  config.profiles = {profile};
  return config;
}

ExecdOptions TestExecdOptions() {
  ExecdOptions options;
  options.max_upload_bytes = kMaxUpload;
  options.download_piece_bytes = 4096;  // Many pieces even for small test files.
  options.poll = absl::Milliseconds(20);
  options.gone_grace = absl::Milliseconds(200);
  options.metrics_sample = absl::Milliseconds(10);
  options.metrics_interval = absl::Milliseconds(100);
  return options;
}

// Waits for `condition` (checked every 5 ms) up to 10 s.
template <typename F>
bool Eventually(F condition) {
  for (int i = 0; i < 2000; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// The JSON of each "data:" event of an SSE body.
std::vector<json> Events(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    std::string event = body.substr(at, end - at);
    if (event.rfind("data: ", 0) == 0) out.push_back(json::parse(event.substr(6), nullptr, false));
    at = end + 2;
  }
  return out;
}

std::vector<std::string> Types(const std::vector<json>& events) {
  std::vector<std::string> out;
  for (const json& e : events) out.push_back(e.value("type", "?"));
  return out;
}

class ExecdApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpApiOptions options{kNodeToken, kMaxBody, std::nullopt};
    options.execd = &execd_;
    auto api = HttpApi::Create(&service_, options);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
    auto port = api_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    client_ = NewClient();
    CreateRequest create;
    create.profile = "default";
    create.env = {{"LANG", "C.UTF-8"}, {"FROM_SANDBOX", "1"}, {"OVERRIDDEN", "sandbox"}};
    auto record = service_.Create(create);
    ASSERT_TRUE(record.ok()) << record.status();
    id_ = record->id;
    token_ = record->token;
    prefix_ = "/v1/sandboxes/" + id_ + "/execd";
  }

  void TearDown() override { api_->Stop(); }

  std::unique_ptr<httplib::Client> NewClient() {
    auto client = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client->set_connection_timeout(5);
    client->set_read_timeout(10);
    return client;
  }

  httplib::Headers Auth() { return {{"X-EXECD-ACCESS-TOKEN", token_}}; }

  std::pair<int, std::string> Call(const std::string& method, const std::string& path,
                                   const std::string& body = "",
                                   const std::string& content_type = "application/json") {
    httplib::Result r = method == "GET" ? client_->Get(prefix_ + path, Auth())
                        : method == "DELETE"
                            ? client_->Delete(prefix_ + path, Auth())
                            : client_->Post(prefix_ + path, Auth(), body, content_type);
    EXPECT_TRUE(r) << method << " " << path << ": " << httplib::to_string(r.error());
    if (!r) return {0, ""};
    return {r->status, r->body};
  }

  std::vector<json> Run(const json& request) {
    auto [status, body] = Call("POST", "/command", request.dump());
    EXPECT_EQ(status, 200) << body;
    return Events(body);
  }

  json Status(const std::string& command_id) {
    auto [status, body] = Call("GET", "/command/status/" + command_id);
    EXPECT_EQ(status, 200) << body;
    return json::parse(body, nullptr, false);
  }

  int Upload(const std::string& path, const std::string& data, const std::string& mode = "644") {
    httplib::MultipartFormDataItems items = {
        {"metadata", R"({"path": ")" + path + R"(", "mode": )" + mode + "}", "",
         "application/json"},
        {"file", data, "upload", "application/octet-stream"}};
    auto r = client_->Post(prefix_ + "/files/upload", Auth(), items);
    EXPECT_TRUE(r);
    return r ? r->status : 0;
  }

  // Sends only the request line and headers (Content-Length: `length`) and returns what the
  // server answers before any body byte: a limit must be enforced from the header.
  std::string HeadersOnly(const std::string& method, const std::string& path, uint64_t length,
                          const std::string& content_type) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string request = method + " " + path +
                          " HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: " + token_ +
                          "\r\nContent-Type: " + content_type +
                          "\r\nContent-Length: " + std::to_string(length) + "\r\n\r\n";
    EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string answer;
    char buf[4096];
    // Until the whole answer is in (its Content-Length), as the server keeps the connection.
    auto complete = [&] {
      size_t end = answer.find("\r\n\r\n");
      size_t at = answer.find("Content-Length: ");
      if (end == std::string::npos || at == std::string::npos) return false;
      return answer.size() >= end + 4 + std::stoul(answer.substr(at + 16));
    };
    for (ssize_t n; !complete() && (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) {
      answer.append(buf, n);
    }
    ::close(fd);
    return answer;
  }

  FakeClock clock_;
  AgentConfig config_ = TestConfig();
  FakeBackend backend_;
  Registry registry_{&clock_};
  AgentMetrics metrics_{{"default"}};
  SandboxService service_{&config_, &backend_, &registry_, &metrics_, &clock_};
  ExecdApi execd_{&backend_, &registry_, &metrics_, &clock_, TestExecdOptions()};
  std::unique_ptr<HttpApi> api_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
  std::string id_, token_, prefix_;
};

TEST_F(ExecdApiTest, ForegroundCommandStreamsEventsInOrder) {
  ExecRequest seen;
  backend_.SetProcessScript([&](const ExecRequest& request, FakeProcess& process) {
    seen = request;
    process.Stdout("one\n");
    process.Stderr("two\n");
    process.Stdout("thr");
    process.Stdout("ee\n\nfour\r\nfive\n");
    return 3;
  });
  std::vector<json> events = Run({{"command", "do things"},
                                  {"cwd", "/workspace/sub"},
                                  {"envs", {{"OVERRIDDEN", "request"}, {"EXTRA", "x"}}}});
  // One event per line, terminator removed, a blank line as "\n"; a failure is execd's error
  // event, with no execution_complete after it.
  ASSERT_THAT(Types(events), ElementsAre("init", "stdout", "stderr", "stdout", "stdout", "stdout",
                                         "stdout", "error"));
  std::string command_id = events[0]["text"];
  EXPECT_THAT(command_id, HasSubstr("cmd-"));
  EXPECT_EQ(events[1]["text"], "one");
  EXPECT_EQ(events[2]["text"], "two");
  EXPECT_EQ(events[3]["text"], "three");
  EXPECT_EQ(events[4]["text"], "\n");
  EXPECT_EQ(events[5]["text"], "four");
  EXPECT_EQ(events[6]["text"], "five");
  EXPECT_EQ(events[7]["error"]["ename"], "CommandExecError");
  EXPECT_EQ(events[7]["error"]["evalue"], "3");
  for (const json& e : events) EXPECT_EQ(e["timestamp"], absl::ToUnixMillis(clock_.Now()));

  EXPECT_EQ(seen.command, "do things");
  EXPECT_EQ(seen.cwd, "/workspace/sub");
  std::map<std::string, std::string> env(seen.env.begin(), seen.env.end());
  EXPECT_EQ(env["LANG"], "C.UTF-8");
  EXPECT_EQ(env["FROM_SANDBOX"], "1");
  EXPECT_EQ(env["OVERRIDDEN"], "request");  // The request's env wins over the sandbox's.
  EXPECT_EQ(env["EXTRA"], "x");
  EXPECT_THAT(env["PATH"], HasSubstr("/usr/bin"));

  json status = Status(command_id);
  EXPECT_EQ(status["id"], command_id);
  EXPECT_EQ(status["status"], "exited");
  EXPECT_EQ(status["content"], "do things");
  EXPECT_EQ(status["running"], false);
  EXPECT_EQ(status["exit_code"], 3);
  EXPECT_TRUE(status["finished_at"].is_string());

  // A command that succeeds ends with execution_complete and no error.
  backend_.SetProcessScript(nullptr);
  std::vector<json> ok = Run({{"command", "echo hi"}});
  EXPECT_THAT(Types(ok), ElementsAre("init", "stdout", "execution_complete"));
  EXPECT_TRUE(ok.back()["execution_time"].is_number_integer());
  EXPECT_THAT(metrics_.Serialize(), HasSubstr("moat_command_duration_seconds_count 2"));
}

TEST_F(ExecdApiTest, OutputIsStreamedAsItComes) {
  absl::Notification first_seen;
  std::atomic<bool> released_by_client{false};
  backend_.SetProcessScript([&](const ExecRequest&, FakeProcess& process) {
    process.Stdout("first\n");
    // Only a client that got "first" while the command runs lets it go on.
    released_by_client = first_seen.WaitForNotificationWithTimeout(absl::Seconds(10));
    process.Stdout("second\n");
    return 0;
  });
  httplib::Request req;
  req.method = "POST";
  req.path = prefix_ + "/command";
  req.headers = Auth();
  req.body = R"({"command": "slow"})";
  req.set_header("Content-Type", "application/json");
  std::string received;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    received.append(data, len);
    if (received.find("first") != std::string::npos && !first_seen.HasBeenNotified()) {
      first_seen.Notify();
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error;
  ASSERT_TRUE(client_->send(req, res, error)) << httplib::to_string(error);
  EXPECT_TRUE(released_by_client);
  EXPECT_THAT(Types(Events(received)),
              ElementsAre("init", "stdout", "stdout", "execution_complete"));
}

TEST_F(ExecdApiTest, BackgroundCommandStatusAndLogsWithCursor) {
  absl::Notification go_on;
  backend_.SetProcessScript([&](const ExecRequest&, FakeProcess& process) {
    process.Stdout("a\nb\n");
    go_on.WaitForNotificationWithTimeout(absl::Seconds(10));
    process.Stderr("c\n");
    return 0;
  });
  std::vector<json> events = Run({{"command", "server"}, {"background", true}});
  ASSERT_THAT(Types(events), ElementsAre("init"));  // Returns at once.
  std::string command_id = events[0]["text"];
  EXPECT_EQ(Status(command_id)["running"], true);
  EXPECT_TRUE(Status(command_id)["exit_code"].is_null());
  EXPECT_EQ(registry_.Get(id_)->state, SandboxState::kRunning);

  std::string logs_path = "/command/" + command_id + "/logs";
  ASSERT_TRUE(Eventually([&] { return Call("GET", logs_path).second == "a\nb\n"; }));
  auto r = client_->Get(prefix_ + logs_path, Auth());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("EXECD-COMMANDS-TAIL-CURSOR"), "2");
  go_on.Notify();
  ASSERT_TRUE(Eventually([&] { return Status(command_id)["running"] == false; }));
  EXPECT_EQ(Status(command_id)["exit_code"], 0);
  r = client_->Get(prefix_ + logs_path + "?cursor=2", Auth());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "c\n");
  EXPECT_EQ(r->get_header_value("EXECD-COMMANDS-TAIL-CURSOR"), "3");
  r = client_->Get(prefix_ + logs_path + "?cursor=3", Auth());
  EXPECT_EQ(r->body, "");
  EXPECT_EQ(Call("GET", logs_path).second, "a\nb\nc\n");
  ASSERT_TRUE(Eventually([&] { return registry_.Get(id_)->state == SandboxState::kReady; }));

  ExpectError(Call("GET", logs_path + "?cursor=x"), 400, "INVALID_REQUEST");
  ExpectError(Call("GET", "/command/cmd-nope/logs"), 404, "NOT_FOUND");
  ExpectError(Call("GET", "/command/status/cmd-nope"), 404, "NOT_FOUND");
}

TEST_F(ExecdApiTest, InterruptEndsARunningCommand) {
  backend_.SetProcessScript([](const ExecRequest&, FakeProcess& process) {
    process.WaitEnded(absl::Seconds(10));
    return 0;
  });
  std::string command_id = Run({{"command", "sleep 100"}, {"background", true}})[0]["text"];
  EXPECT_EQ(Status(command_id)["running"], true);
  auto [status, body] = Call("DELETE", "/command?id=" + command_id);
  EXPECT_EQ(status, 200) << body;
  ASSERT_TRUE(Eventually([&] { return Status(command_id)["running"] == false; }));
  json after = Status(command_id);
  EXPECT_EQ(after["exit_code"], 130);
  EXPECT_THAT(after["error"].get<std::string>(), HasSubstr("interrupted"));
  // Interrupting a finished command is fine; an unknown one is not.
  EXPECT_EQ(Call("DELETE", "/command?id=" + command_id).first, 200);
  ExpectError(Call("DELETE", "/command?id=cmd-unknown"), 404, "NOT_FOUND");
  ExpectError(Call("DELETE", "/command"), 400, "INVALID_REQUEST");
}

TEST_F(ExecdApiTest, TimeoutKillsTheCommand) {
  absl::Duration timeout_seen;
  backend_.SetProcessScript([&](const ExecRequest& request, FakeProcess& process) {
    timeout_seen = request.timeout;
    process.Stdout("started\n");
    process.WaitEnded(absl::Seconds(10));
    return 0;
  });
  std::vector<json> events = Run({{"command", "sleep 100"}, {"timeout", 50}});
  EXPECT_EQ(timeout_seen, absl::Milliseconds(50));
  ASSERT_THAT(Types(events), ElementsAre("init", "stdout", "error"));
  EXPECT_EQ(events[2]["error"]["ename"], "CommandTimeout");
  EXPECT_EQ(events[2]["error"]["evalue"], "137");
}

// moat's run_result (POST /v1/run sends it): the backend is asked to settle the sandbox's
// reports, each stream's first bytes are kept as `moat run` keeps them, and the status lists
// the violations of the sandbox while the command ran, in moat run's words, and the cut.
TEST_F(ExecdApiTest, RunResultKeepsTheFirstOutputAndListsTheViolations) {
  bool settle_asked = false;
  std::string big;
  while (big.size() < TestExecdOptions().commands.max_log_bytes + 10) big += "0123456789abcd\n";
  backend_.SetExecHandler([&](const ExecRequest& request) {
    settle_asked = request.settle_reports;
    execd_.AddViolation(id_, "seccomp", "blocked system call mount");
    execd_.AddViolation(id_, "network", "GET 127.0.0.1:9 (http) denied: no rule allows it");
    execd_.AddViolation("sb-other", "seccomp", "blocked system call ptrace");
    FakeBackend::FakeOutput out;
    out.out = big;
    out.err = "e\n";
    return out;
  });
  std::vector<json> events = Run({{"command", "x"}, {"run_result", true}});
  EXPECT_TRUE(settle_asked);
  std::string out;
  for (const json& e : events) {
    if (e["type"] != "stdout") continue;
    const std::string text = e["text"];
    out += text == "\n" ? text : e.value("partial", false) ? text : text + "\n";
  }
  // 1 MiB is not a whole number of 15-byte lines: the last one kept is cut, as moat run cuts it.
  EXPECT_EQ(out, big.substr(0, TestExecdOptions().commands.max_log_bytes));
  json status = Status(events[0]["text"]);
  EXPECT_EQ(status["stdout_truncated"], true);
  EXPECT_EQ(status["stderr_truncated"], false);
  EXPECT_EQ(status["violations"],
            json::parse(R"([{"kind": "seccomp", "detail": "blocked system call mount"},
                            {"kind": "network",
                             "detail": "GET 127.0.0.1:9 (http) denied: no rule allows it"}])"));
  EXPECT_FALSE(status.contains("violations_dropped"));
  // Without it: nothing to settle, the newest output kept.
  events = Run({{"command", "x"}});
  EXPECT_FALSE(settle_asked);
  status = Status(events[0]["text"]);
  EXPECT_EQ(status["stdout_truncated"], false);
  ExpectError(Call("POST", "/command", R"({"command": "x", "run_result": 1})"), 400,
              "INVALID_REQUEST");
}

// moat's extension for POST /v1/run: a CPU-time limit in, the sandbox's CPU time and peak
// memory across the command out (what `moat run --json` reports).
TEST_F(ExecdApiTest, CpuTimeoutGoesInAndCpuAndPeakMemoryComeOut) {
  absl::Duration cpu_timeout_seen;
  backend_.SetExecHandler([&](const ExecRequest& request) {
    cpu_timeout_seen = request.cpu_timeout;
    FakeBackend::FakeOutput out;
    out.exit_code = 137;
    out.cpu_timed_out = true;
    out.cpu = absl::Milliseconds(1250);
    out.peak_memory_bytes = 5 << 20;
    return out;
  });
  std::vector<json> events = Run({{"command", "spin"}, {"cpu_timeout", 1000}});
  EXPECT_EQ(cpu_timeout_seen, absl::Seconds(1));
  ASSERT_EQ(events.back()["type"], "error");
  EXPECT_EQ(events.back()["error"]["ename"], "CommandTimeout");
  json status = Status(events[0]["text"]);
  EXPECT_EQ(status["status"], "cpu_timeout");
  EXPECT_DOUBLE_EQ(status["cpu_seconds"].get<double>(), 1.25);
  EXPECT_EQ(status["peak_memory_bytes"], 5 << 20);
  // Without a cgroup figure, nothing is made up.
  backend_.SetExecHandler([&](const ExecRequest& request) {
    cpu_timeout_seen = request.cpu_timeout;
    return FakeBackend::FakeOutput{};
  });
  events = Run({{"command", "true"}});
  EXPECT_EQ(cpu_timeout_seen, absl::InfiniteDuration());
  status = Status(events[0]["text"]);
  EXPECT_EQ(status["status"], "exited");
  EXPECT_FALSE(status.contains("cpu_seconds"));
  EXPECT_FALSE(status.contains("peak_memory_bytes"));
  ExpectError(Call("POST", "/command", R"({"command": "x", "cpu_timeout": -1})"), 400,
              "INVALID_REQUEST");
}

TEST_F(ExecdApiTest, OutputIsCleanedLikeMoatRunJson) {
  backend_.SetExecHandler([](const ExecRequest&) {
    return FakeBackend::FakeOutput{
        std::string("\x1b[31mred\x1b[0m key ") + kFakeAwsKey + "\r\n\x1b]0;title\x07" + "done",
        "\x07"
        "bell\n",
        0};
  });
  std::vector<json> events = Run({{"command", "print"}});
  // The partial last line of stdout comes at exit, after stderr's complete line.
  ASSERT_THAT(Types(events),
              ElementsAre("init", "stdout", "stderr", "stdout", "execution_complete"));
  EXPECT_EQ(events[1]["text"], "red key [REDACTED:aws_access_key]");
  EXPECT_EQ(events[2]["text"], "bell");
  EXPECT_EQ(events[3]["text"], "done");  // The partial last line, flushed at the end.
  // moat's marker: only the line that had no terminator says so.
  EXPECT_EQ(events[3].value("partial", false), true);
  EXPECT_FALSE(events[1].contains("partial"));
  EXPECT_FALSE(events[2].contains("partial"));
  std::string logs =
      Call("GET", "/command/" + events[0]["text"].get<std::string>() + "/logs").second;
  EXPECT_THAT(logs, HasSubstr("[REDACTED:aws_access_key]"));
  EXPECT_THAT(logs, Not(HasSubstr(kFakeAwsKey)));
  EXPECT_THAT(logs, Not(HasSubstr("\x1b")));
}

TEST_F(ExecdApiTest, UploadDownloadAndRange) {
  std::string data;
  for (int i = 0; i < 20000; ++i) data += static_cast<char>('a' + i % 26);
  ASSERT_EQ(Upload("/workspace/d/f.bin", data, "600"), 200);
  auto info = Call("GET", "/files/info?path=/workspace/d/f.bin");
  ASSERT_EQ(info.first, 200) << info.second;
  json stat = json::parse(info.second)["/workspace/d/f.bin"];
  EXPECT_EQ(stat["size"], data.size());
  EXPECT_EQ(stat["mode"], 600);
  EXPECT_EQ(stat["type"], "file");

  auto full = client_->Get(prefix_ + "/files/download?path=d/f.bin", Auth());
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 200);
  EXPECT_EQ(full->body, data);  // Read through the backend in 4 KiB pieces.

  httplib::Headers ranged = Auth();
  ranged.emplace("Range", "bytes=10-19");
  auto part = client_->Get(prefix_ + "/files/download?path=/workspace/d/f.bin", ranged);
  ASSERT_TRUE(part);
  EXPECT_EQ(part->status, 206);
  EXPECT_EQ(part->body, data.substr(10, 10));
  EXPECT_EQ(part->get_header_value("Content-Range"), "bytes 10-19/20000");

  ranged = Auth();
  ranged.emplace("Range", "bytes=-5");
  part = client_->Get(prefix_ + "/files/download?path=/workspace/d/f.bin", ranged);
  ASSERT_TRUE(part);
  EXPECT_EQ(part->status, 206);
  EXPECT_EQ(part->body, data.substr(data.size() - 5));

  ranged = Auth();
  ranged.emplace("Range", "bytes=19990-30000");  // Clamped to the end.
  part = client_->Get(prefix_ + "/files/download?path=/workspace/d/f.bin", ranged);
  ASSERT_TRUE(part);
  EXPECT_EQ(part->status, 206);
  EXPECT_EQ(part->body, data.substr(19990));

  for (std::string range : {"bytes=20000-", "bytes=30-20", "bytes=0-1,5-6", "lines=1-2",
                            "bytes=99999999999999999999-", "bytes=0-99999999999999999999"}) {
    SCOPED_TRACE(range);
    ranged = Auth();
    ranged.emplace("Range", range);
    auto bad = client_->Get(prefix_ + "/files/download?path=/workspace/d/f.bin", ranged);
    ASSERT_TRUE(bad);
    ExpectError({bad->status, bad->body}, 416, "RANGE_NOT_SATISFIABLE");
  }
  ExpectError(Call("GET", "/files/download?path=/workspace/missing"), 404, "NOT_FOUND");
  ExpectError(Call("GET", "/files/download?path=/workspace/d"), 400, "INVALID_REQUEST");

  ASSERT_EQ(Upload("/workspace/lines.txt", "l1\nl2\nl3\nl4\n"), 200);
  EXPECT_EQ(Call("GET", "/files/download?path=lines.txt&offset=2&limit=2").second, "l2\nl3\n");
}

// The file is opened once: replaced after the first bytes went out, the download still sends
// the file it opened, not a mix of the two (it used to read each piece by path).
TEST_F(ExecdApiTest, ADownloadSendsTheFileItOpenedEvenIfReplacedMeanwhile) {
  const size_t size = 16 << 20;  // Far more than the socket buffers hold.
  ASSERT_TRUE(backend_.WriteFile(id_, "/workspace/big", std::string(size, 'a'), 0644).ok());
  std::string got;
  bool replaced = false;
  auto r = client_->Get(
      prefix_ + "/files/download?path=/workspace/big", Auth(), [&](const char* data, size_t n) {
        if (!replaced) {
          replaced = true;
          EXPECT_TRUE(backend_.WriteFile(id_, "/workspace/big", std::string(size, 'b'), 0644).ok());
        }
        got.append(data, n);
        return true;
      });
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(got.size(), size);
  EXPECT_EQ(got.find('b'), std::string::npos);
}

// FIFOs, sockets and devices are not files to download or edit (they answered 200 with nothing).
TEST_F(ExecdApiTest, SpecialFilesAreRefusedByDownloadAndReplace) {
  backend_.AddSpecialFile(id_, "/workspace/pipe");
  ExpectError(Call("GET", "/files/download?path=/workspace/pipe"), 400, "INVALID_REQUEST");
  ExpectError(Call("POST", "/files/replace", R"({"/workspace/pipe": {"old": "a", "new": "b"}})"),
              400, "INVALID_REQUEST");
}

TEST_F(ExecdApiTest, HugeUploadIs413) {
  std::string big(kMaxUpload + 1, 'x');
  EXPECT_EQ(Upload("/workspace/big", big), 413);
  ASSERT_EQ(Upload("/workspace/fits", std::string(kMaxUpload, 'x')), 200);
  // Far above the limit: refused from Content-Length alone, before any of the body is sent.
  std::string answer = HeadersOnly("POST", prefix_ + "/files/upload", 3 * kMaxUpload,
                                   "multipart/form-data; boundary=xyz");
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 413"));
  EXPECT_THAT(answer, HasSubstr("upload limit"));
  // Other routes keep the small limit.
  answer = HeadersOnly("POST", prefix_ + "/command", kMaxBody + 1, "application/json");
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 413"));
  EXPECT_THAT(answer, HasSubstr("max_request_bytes"));
  EXPECT_EQ(Call("GET", "/files/info?path=/workspace/fits").first, 200);
  ExpectError(Call("GET", "/files/info?path=/workspace/big"), 404, "NOT_FOUND");
}

TEST_F(ExecdApiTest, ListStatMoveDeleteMkdirSearch) {
  ASSERT_EQ(
      Call("POST", "/directories", R"({"/workspace/p/src": {"mode": 755}, "logs": {}})").first,
      200);
  ASSERT_EQ(Upload("/workspace/p/src/main.py", "print(1)\n"), 200);
  ASSERT_EQ(Upload("/workspace/p/README.md", "# hi\n"), 200);
  ASSERT_EQ(Upload("/workspace/p/notes.txt", "n\n"), 200);

  auto paths = [](const std::string& body) {
    std::vector<std::string> out;
    for (const json& item : json::parse(body)) out.push_back(item["path"]);
    return out;
  };
  auto list = Call("GET", "/directories/list?path=/workspace/p");
  ASSERT_EQ(list.first, 200) << list.second;
  EXPECT_THAT(paths(list.second),
              ElementsAre("/workspace/p/README.md", "/workspace/p/notes.txt", "/workspace/p/src"));
  list = Call("GET", "/directories/list?path=/workspace&depth=3");
  EXPECT_THAT(paths(list.second), ElementsAre("/workspace/logs", "/workspace/p",
                                              "/workspace/p/README.md", "/workspace/p/notes.txt",
                                              "/workspace/p/src", "/workspace/p/src/main.py"));
  EXPECT_EQ(json::parse(Call("GET", "/directories/list?path=p&depth=0").second).size(), 0u);
  ExpectError(Call("GET", "/directories/list?path=p&depth=-1"), 400, "INVALID_REQUEST");
  ExpectError(Call("GET", "/directories/list?path=/workspace/nope"), 404, "NOT_FOUND");

  auto search = Call("GET", "/files/search?path=/workspace&pattern=*.py");
  ASSERT_EQ(search.first, 200) << search.second;
  EXPECT_THAT(paths(search.second), ElementsAre("/workspace/p/src/main.py"));
  search = Call("GET", "/files/search?path=/workspace/p&pattern=**/*.md");
  EXPECT_THAT(paths(search.second), ElementsAre("/workspace/p/README.md"));
  search = Call("GET", "/files/search?path=/workspace");
  EXPECT_EQ(paths(search.second).size(), 3u);

  auto mv = Call("POST", "/files/mv",
                 R"([{"src": "/workspace/p/notes.txt", "dest": "/workspace/logs/notes.txt"}])");
  ASSERT_EQ(mv.first, 200) << mv.second;
  auto info = Call("GET", "/files/info?path=/workspace/logs/notes.txt&path=p/README.md");
  ASSERT_EQ(info.first, 200) << info.second;
  json stats = json::parse(info.second);
  EXPECT_EQ(stats["/workspace/logs/notes.txt"]["size"], 2);
  EXPECT_EQ(stats["p/README.md"]["path"], "/workspace/p/README.md");
  ExpectError(Call("GET", "/files/info?path=/workspace/p/notes.txt"), 404, "NOT_FOUND");

  auto replace = Call("POST", "/files/replace?verbose=true",
                      R"({"/workspace/p/src/main.py": {"old": "1", "new": "42"}})");
  ASSERT_EQ(replace.first, 200) << replace.second;
  EXPECT_EQ(json::parse(replace.second)["/workspace/p/src/main.py"]["replacedCount"], 1);
  EXPECT_EQ(Call("GET", "/files/download?path=p/src/main.py").second, "print(42)\n");
  // execd's chmodFiles: the mode changes; owner and group must be mapped in the sandbox.
  auto chmod =
      Call("POST", "/files/permissions",
           R"({"/workspace/p/src/main.py": {"mode": 700, "owner": "root", "group": "root"}})");
  EXPECT_EQ(chmod.first, 200) << chmod.second;
  json stat_after = json::parse(Call("GET", "/files/info?path=/workspace/p/src/main.py").second);
  EXPECT_EQ(stat_after["/workspace/p/src/main.py"]["mode"], 700) << stat_after.dump();
  ExpectError(Call("POST", "/files/permissions",
                   R"({"/workspace/p/src/main.py": {"mode": 644, "owner": "admin"}})"),
              400, "INVALID_REQUEST");
  ExpectError(Call("POST", "/files/permissions", R"({"/workspace/p/src/main.py": {"mode": 9}})"),
              400, "INVALID_REQUEST");
  ExpectError(Call("POST", "/files/permissions", R"({"/workspace/nope": {"mode": 644}})"), 404,
              "NOT_FOUND");

  ExpectError(Call("DELETE", "/files?path=/workspace/p/src"), 400, "INVALID_REQUEST");
  EXPECT_EQ(Call("DELETE", "/files?path=/workspace/p/README.md").first, 200);
  ExpectError(Call("GET", "/files/info?path=/workspace/p/README.md"), 404, "NOT_FOUND");
  ExpectError(Call("DELETE", "/directories?path=/workspace/logs/notes.txt"), 400,
              "INVALID_REQUEST");
  ExpectError(Call("DELETE", "/directories?path=/workspace"), 400, "INVALID_REQUEST");
  EXPECT_EQ(Call("DELETE", "/directories?path=/workspace/p").first, 200);
  ExpectError(Call("GET", "/files/info?path=/workspace/p/src/main.py"), 404, "NOT_FOUND");
}

TEST_F(ExecdApiTest, PathsOutsideTheWorkspaceAreRefused) {
  ASSERT_EQ(Upload("/workspace/ok.txt", "ok"), 200);
  for (std::string bad : {"../etc/passwd", "/etc/passwd", "/workspace/../etc/passwd",
                          "/workspace/a/../../x", "a%00b", "a%01b", "/workspacex/y", "/"}) {
    SCOPED_TRACE(bad);
    ExpectError(Call("GET", "/files/info?path=" + bad), 400, "INVALID_REQUEST");
    ExpectError(Call("GET", "/files/download?path=" + bad), 400, "INVALID_REQUEST");
    ExpectError(Call("DELETE", "/files?path=" + bad), 400, "INVALID_REQUEST");
    ExpectError(Call("DELETE", "/directories?path=" + bad), 400, "INVALID_REQUEST");
    ExpectError(Call("GET", "/directories/list?path=" + bad), 400, "INVALID_REQUEST");
    ExpectError(Call("GET", "/files/search?path=" + bad), 400, "INVALID_REQUEST");
  }
  // A relative cwd is under /workspace and checked like a path (an absolute one is any
  // directory of the sandbox's own file system).
  ExpectError(Call("POST", "/command", json{{"command", "ls"}, {"cwd", "../x"}}.dump()), 400,
              "INVALID_REQUEST");
  for (std::string bad : {"../x", "/etc/x", "/workspace/../../x"}) {
    SCOPED_TRACE(bad);
    json item = json::array({{{"src", "/workspace/ok.txt"}, {"dest", bad}}});
    ExpectError(Call("POST", "/files/mv", item.dump()), 400, "INVALID_REQUEST");
    ExpectError(Call("POST", "/directories", json{{bad, {{"mode", 755}}}}.dump()), 400,
                "INVALID_REQUEST");
    EXPECT_EQ(Upload(bad, "x"), 400);
  }
  // JSON strings can carry a NUL byte.
  ExpectError(Call("POST", "/files/mv", R"([{"src": "ok.txt", "dest": "a\u0000b"}])"), 400,
              "INVALID_REQUEST");
  EXPECT_EQ(Call("GET", "/files/info?path=/workspace/ok.txt").first, 200);  // Still there.
}

// "~" and "$VAR" are the sandbox's: HOME (here unset: /workspace) and its create-time env.
TEST_F(ExecdApiTest, TildeAndVariablesExpandAgainstTheSandboxsEnvironment) {
  ASSERT_EQ(Upload("~/home.txt", "h"), 200);
  EXPECT_EQ(Call("GET", "/files/info?path=/workspace/home.txt").first, 200);
  ASSERT_EQ(Upload("/workspace/f$FROM_SANDBOX.txt", "v"), 200);
  ASSERT_EQ(Upload("/workspace/g${FROM_SANDBOX}x", "w"), 200);
  EXPECT_EQ(Call("GET", "/files/download?path=/workspace/f1.txt").second, "v");
  EXPECT_EQ(Call("GET", "/files/download?path=/workspace/g1x").second, "w");
  EXPECT_EQ(Call("GET", "/files/download?path=~/home.txt").second, "h");
}

// execd's Metrics, of the sandbox: its CPU quota and memory limit, its cgroup's usage.
TEST_F(ExecdApiTest, MetricsAndMetricsWatchDescribeTheSandbox) {
  backend_.SetSandboxUsage(id_, 1.0, 64 << 20);
  auto [status, body] = Call("GET", "/metrics");
  ASSERT_EQ(status, 200) << body;
  json m = json::parse(body);
  EXPECT_EQ(m["cpu_count"], 2.0);
  EXPECT_EQ(m["mem_total_mib"], 1024.0);
  EXPECT_EQ(m["mem_used_mib"], 64.0);
  EXPECT_EQ(m["cpu_used_pct"], 0.0);  // No CPU time used during the sample.
  EXPECT_TRUE(m["timestamp"].is_number_integer());

  std::string received;
  int seen = 0;
  httplib::Request req;
  req.method = "GET";
  req.path = prefix_ + "/metrics/watch";
  req.headers = Auth();
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    received.append(data, len);
    if (seen == 0) backend_.SetSandboxUsage(id_, 2.0, 128 << 20);  // Then one more event.
    seen = static_cast<int>(Events(received).size());
    return seen < 2;
  };
  httplib::Response res;
  httplib::Error error;
  client_->send(req, res, error);  // Ended by the receiver: an error, expected.
  std::vector<json> events = Events(received);
  ASSERT_GE(events.size(), 2u) << received;
  EXPECT_EQ(events[0]["mem_used_mib"], 64.0);
  EXPECT_EQ(events[1]["mem_used_mib"], 128.0);
  EXPECT_GT(events[1]["cpu_used_pct"].get<double>(), 0.0);  // A second of CPU in ~0.1 s.
}

// Pause freezes the sandbox (the backend's freezer); its API refuses work until resume.
TEST_F(ExecdApiTest, APausedSandboxRefusesWorkUntilResumed) {
  httplib::Headers node = {{"Authorization", std::string("Bearer ") + kNodeToken}};
  auto paused = client_->Post("/v1/sandboxes/" + id_ + "/pause", node, "", "application/json");
  ASSERT_TRUE(paused);
  ASSERT_EQ(paused->status, 200) << paused->body;
  EXPECT_EQ(json::parse(paused->body)["paused"], true);
  EXPECT_TRUE(backend_.Paused(id_));
  ExpectError(Call("POST", "/command", R"({"command": "echo hi"})"), 409, "CONFLICT");
  ExpectError(Call("GET", "/files/info?path=/workspace"), 409, "CONFLICT");
  auto resumed = client_->Post("/v1/sandboxes/" + id_ + "/resume", node, "", "application/json");
  ASSERT_TRUE(resumed);
  ASSERT_EQ(resumed->status, 200) << resumed->body;
  EXPECT_EQ(json::parse(resumed->body)["paused"], false);
  EXPECT_FALSE(backend_.Paused(id_));
  EXPECT_THAT(Types(Run({{"command", "echo hi"}})),
              ElementsAre("init", "stdout", "execution_complete"));
  auto unknown = client_->Post("/v1/sandboxes/sb-nope/pause", node, "", "application/json");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
}

TEST_F(ExecdApiTest, WrongTokensAreRefused) {
  CreateRequest create;
  create.profile = "default";
  auto other = service_.Create(create);
  ASSERT_TRUE(other.ok());
  for (const auto& headers :
       std::vector<httplib::Headers>{{},
                                     {{"X-EXECD-ACCESS-TOKEN", other->token}},
                                     {{"X-EXECD-ACCESS-TOKEN", token_ + "x"}},
                                     {{"Authorization", std::string("Bearer ") + kNodeToken}}}) {
    auto r = client_->Post(prefix_ + "/command", headers, R"({"command": "echo x"})",
                           "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << r->body;
    r = client_->Get(prefix_ + "/files/download?path=x", headers);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << r->body;
  }
  auto r = client_->Get(prefix_ + "/files/info?path=/workspace",
                        {{"Authorization", "Bearer " + token_}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// uid and gid are ids inside the sandbox's user namespace: 0 is mapped (its root), others are
// not (a 400 above).
TEST_F(ExecdApiTest, TheMappedIdIsAcceptedForCommands) {
  EXPECT_THAT(Types(Run({{"command", "echo hi"}, {"uid", 0}, {"gid", 0}})),
              ElementsAre("init", "stdout", "execution_complete"));
}

TEST_F(ExecdApiTest, MalformedRequestsAre400) {
  for (std::string body : std::vector<std::string>{"{",
                                                   "",
                                                   "[]",
                                                   "5",
                                                   R"({"command": 5})",
                                                   R"({})",
                                                   R"({"command": "   "})",
                                                   R"({"command": "x", "timeout": -1})",
                                                   R"({"command": "x", "timeout": "5"})",
                                                   R"({"command": "x", "timeout": 1.5})",
                                                   R"({"command": "x", "background": "yes"})",
                                                   R"({"command": "x", "envs": {"A": 1}})",
                                                   R"({"command": "x", "envs": {"A=B": "1"}})",
                                                   R"({"command": "x", "envs": ["A"]})",
                                                   R"({"command": "x", "colour": "red"})",
                                                   R"({"command": "x", "uid": 1000})",
                                                   R"({"command": "x", "gid": 5})",
                                                   R"({"command": "x", "uid": -1})",
                                                   R"({"command": "x", "uid": "0"})",
                                                   R"({"command": "a\u0000b"})",
                                                   "\xff\xfe",
                                                   std::string(100, '[') + std::string(100, ']')}) {
    SCOPED_TRACE(body);
    ExpectError(Call("POST", "/command", body), 400, "INVALID_REQUEST");
  }
  for (std::string body : {"{", "{}", "[1]", R"([{"src": "a"}])", R"([{"src": 1, "dest": "b"}])"}) {
    SCOPED_TRACE(body);
    ExpectError(Call("POST", "/files/mv", body), 400, "INVALID_REQUEST");
  }
  for (std::string body :
       {"{", "[]", R"({"/workspace/a": 5})", R"({"/workspace/a": {"mode": 9}})"}) {
    SCOPED_TRACE(body);
    ExpectError(Call("POST", "/directories", body), 400, "INVALID_REQUEST");
  }
  ExpectError(Call("POST", "/files/replace", R"({"/workspace/a": {"old": ""}})"), 400,
              "INVALID_REQUEST");
  ExpectError(Call("POST", "/files/upload", "not multipart", "text/plain"), 400, "INVALID_REQUEST");
  ExpectError(Call("GET", "/files/info"), 400, "INVALID_REQUEST");
  EXPECT_EQ(backend_.running_processes(), 0);
  EXPECT_EQ(Call("GET", "/ping").first, 200);
}

TEST_F(ExecdApiTest, ConcurrentCommandsOnOneSandbox) {
  constexpr int kThreads = 6;
  constexpr int kRounds = 15;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = NewClient();
      for (int i = 0; i < kRounds; ++i) {
        std::string word = "w" + std::to_string(t) + "-" + std::to_string(i);
        auto r = client->Post(prefix_ + "/command", Auth(),
                              json{{"command", "echo " + word}}.dump(), "application/json");
        if (!r || r->status != 200) {
          ++failures;
          continue;
        }
        std::vector<json> events = Events(r->body);
        if (Types(events) != std::vector<std::string>{"init", "stdout", "execution_complete"} ||
            events[1]["text"] != word) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(Eventually([&] { return registry_.Get(id_)->state == SandboxState::kReady; }));
  // Finished commands are bounded per sandbox.
  EXPECT_LE(execd_.commands().size(), TestExecdOptions().commands.max_finished_per_sandbox);
}

TEST_F(ExecdApiTest, DeletingTheSandboxEndsItsStreams) {
  backend_.SetProcessScript([](const ExecRequest&, FakeProcess& process) {
    process.Stdout("working\n");
    process.WaitEnded(absl::Seconds(10));
    return 0;
  });
  std::string body;
  std::thread runner([&] {
    auto client = NewClient();
    auto r =
        client->Post(prefix_ + "/command", Auth(), R"({"command": "forever"})", "application/json");
    if (r) body = r->body;
  });
  ASSERT_TRUE(Eventually([&] { return backend_.running_processes() == 1; }));
  EXPECT_EQ(registry_.Get(id_)->state, SandboxState::kRunning);
  auto deleted = client_->Delete("/v1/sandboxes/" + id_,
                                 {{"Authorization", std::string("Bearer ") + kNodeToken}});
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200) << deleted->body;
  runner.join();
  std::vector<json> events = Events(body);
  ASSERT_THAT(Types(events), ElementsAre("init", "stdout", "error"));
  EXPECT_EQ(events[2]["error"]["evalue"], "137");  // Killed by the sandbox's end.
  EXPECT_EQ(execd_.commands().size(), 0u);         // Forgotten with the sandbox.
  auto after =
      client_->Post(prefix_ + "/command", Auth(), R"({"command": "echo x"})", "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 401);  // Its token died with it.
}

TEST_F(ExecdApiTest, AStreamEndsEvenIfTheBackendNeverReportsTheEnd) {
  // A backend that loses a command when its sandbox goes: no on_exit until the test says so.
  absl::Notification release;
  backend_.SetProcessScript([&](const ExecRequest&, FakeProcess& process) {
    process.Stdout("working\n");
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return 0;
  });
  std::string body;
  std::thread runner([&] {
    auto client = NewClient();
    auto r =
        client->Post(prefix_ + "/command", Auth(), R"({"command": "stuck"})", "application/json");
    if (r) body = r->body;
  });
  ASSERT_TRUE(Eventually([&] { return backend_.running_processes() == 1; }));
  ASSERT_TRUE(service_.Delete(id_).ok());
  runner.join();  // Ends after gone_grace, while the command is still "running".
  EXPECT_EQ(backend_.running_processes(), 1);
  std::vector<json> events = Events(body);
  ASSERT_THAT(Types(events), ElementsAre("init", "stdout", "error"));
  EXPECT_EQ(events[2]["error"]["ename"], "SandboxDeleted");
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return backend_.running_processes() == 0; }));
}

// execd's keep-alive: {"type": "ping", "text": "pong"} every 3 s while a command is silent
// (their smoke test reads a 20 s command's stream with a 10 s read timeout).
TEST_F(ExecdApiTest, ASilentCommandsStreamCarriesPings) {
  backend_.SetProcessScript([](const ExecRequest&, FakeProcess& process) {
    process.WaitEnded(absl::Milliseconds(3500));
    process.Stdout("done\n");
    return 0;
  });
  std::vector<json> events = Run({{"command", "quiet"}});
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[1]["type"], "ping");
  EXPECT_EQ(events[1]["text"], "pong");
  EXPECT_EQ(events[events.size() - 2]["text"], "done");
  EXPECT_EQ(events.back()["type"], "execution_complete");
}

TEST_F(ExecdApiTest, StoppingTheServerEndsStreamsButNotCommands) {
  backend_.SetProcessScript([](const ExecRequest&, FakeProcess& process) {
    process.WaitEnded(absl::Seconds(10));
    return 0;
  });
  std::thread runner([&] {
    auto client = NewClient();
    client->Post(prefix_ + "/command", Auth(), R"({"command": "forever"})", "application/json");
  });
  ASSERT_TRUE(Eventually([&] { return backend_.running_processes() == 1; }));
  api_->Stop();
  // Stop did not wait for the command: it still runs (the fake ends it at destruction).
  EXPECT_EQ(backend_.running_processes(), 1);
  runner.join();
}

// Nothing a client sends crashes the agent: each route's valid body spoiled every way
// (util/testing/spoiled_json.h) gets an answer below 500, and a refusal is a flat
// {code, message}. Node API and execd API alike.
TEST_F(ExecdApiTest, SpoiledBodiesGetA4xxNeverA5xx) {
  ASSERT_EQ(Upload("/workspace/a.txt", "x"), 200);
  const httplib::Headers node = {{"Authorization", std::string("Bearer ") + kNodeToken}};
  struct Route {
    std::string path;  // Under the sandbox's execd prefix, or absolute for the node API.
    json valid;
    bool node_api = false;
  };
  const std::vector<Route> routes = {
      {"/command",
       {{"command", "echo x"},
        {"cwd", "/workspace"},
        {"background", false},
        {"timeout", 5000},
        {"cpu_timeout", 5000},
        {"envs", {{"A", "b"}}},
        {"uid", 0},
        {"gid", 0}}},
      {"/session", {{"cwd", "/workspace"}}},  // The fake's root has no bash: a 409 when valid.
      {"/files/mv", json::array({{{"src", "/workspace/a.txt"}, {"dest", "/workspace/b.txt"}}})},
      {"/files/permissions",
       {{"/workspace/a.txt", {{"mode", 644}, {"owner", "root"}, {"group", "root"}}}}},
      {"/files/replace", {{"/workspace/a.txt", {{"old", "x"}, {"new", "y"}}}}},
      {"/directories", {{"/workspace/d", {{"mode", 755}}}}},
      {"/v1/sandboxes",
       {{"profile", "default"},
        {"ttl_seconds", 60},
        {"env", {{"A", "b"}}},
        {"metadata", {{"k", "v"}}},
        {"limits",
         {{"cpus", 1}, {"memory_bytes", 1 << 20}, {"pids", 10}, {"workspace_bytes", 1 << 20}}}},
       true},
      {"/v1/sandboxes/" + id_ + "/renew", {{"ttl_seconds", 60}}, true},
  };
  int requests = 0;
  for (const Route& route : routes) {
    for (const json& body : moat::testing::Spoiled(route.valid)) {
      const std::string text = body.dump();
      httplib::Result res = client_->Post(route.node_api ? route.path : prefix_ + route.path,
                                          route.node_api ? node : Auth(), text, "application/json");
      ++requests;
      ASSERT_TRUE(res) << route.path << " gave no answer to " << text.substr(0, 300);
      EXPECT_LT(res->status, 500) << route.path << " " << text.substr(0, 300) << " -> "
                                  << res->body.substr(0, 300);
      if (res->status >= 400) {
        json error = json::parse(res->body, nullptr, false);
        EXPECT_TRUE(error.is_object() && error.contains("code") && error.contains("message"))
            << route.path << " " << text.substr(0, 300) << " -> " << res->body.substr(0, 300);
      }
    }
  }
  EXPECT_GT(requests, 300);
  EXPECT_EQ(client_->Get("/health", node)->status, 200);
}

}  // namespace
}  // namespace moat::agent
