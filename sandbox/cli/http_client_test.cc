#include "sandbox/cli/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::cli {
namespace {

using ::testing::HasSubstr;

TEST(ParseHttpUrlTest, HttpAndHttpsToNamesAndAddresses) {
  auto u = ParseHttpUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_FALSE(u->tls);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "");
  u = ParseHttpUrl("http://localhost/prefix/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");  // Resolved when connecting.
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->base_path, "/prefix");
  u = ParseHttpUrl("http://[::1]:9");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9);
  u = ParseHttpUrl("https://ctl.example");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "ctl.example");
  EXPECT_EQ(u->port, 443);
  EXPECT_FALSE(ParseHttpUrl("http://127.0.0.1:99999").ok());
  EXPECT_FALSE(ParseHttpUrl("127.0.0.1:8080").ok());
  EXPECT_FALSE(ParseHttpUrl("ftp://127.0.0.1").ok());
  EXPECT_FALSE(ParseHttpUrl("http://a b/").ok());
  EXPECT_FALSE(ParseHttpUrl("https://:8443").ok());
}

// A one-shot server on 127.0.0.1 that answers `answer` (sent in small pieces) to one request,
// and keeps what it read.
class OneShotServer {
 public:
  explicit OneShotServer(std::string answer) : answer_(std::move(answer)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 1);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      int c = accept(fd_, nullptr, nullptr);
      char buf[4096];
      // The head, then as many bytes as its Content-Length says (unread bytes at close would
      // make the kernel reset the connection).
      auto complete = [&] {
        size_t end = request_.find("\r\n\r\n");
        if (end == std::string::npos) return false;
        size_t at = request_.find("Content-Length: ");
        size_t length = at == std::string::npos ? 0 : std::stoul(request_.substr(at + 16));
        return request_.size() >= end + 4 + length;
      };
      while (!complete()) {
        ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) break;
        request_.append(buf, static_cast<size_t>(n));
      }
      for (size_t i = 0; i < answer_.size(); i += 7) {
        (void)!write(c, answer_.data() + i, std::min<size_t>(7, answer_.size() - i));
        usleep(100);
      }
      close(c);
    });
  }
  ~OneShotServer() {
    Join();
    close(fd_);
  }
  int port() const { return port_; }
  // Waits for the server to finish; the request it read.
  const std::string& Join() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  std::string answer_, request_;
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

TEST(SendHttpTest, ChunkedBodiesArriveWholeAndInOrder) {
  std::string answer =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
      "6\r\ndata: \r\n"
      "b;ext=1\r\nhello world\r\n"
      "1\r\n\n\r\n"
      "0\r\n\r\n";
  std::string body;
  OneShotServer server(answer);
  HttpRequest req;
  req.method = "POST";
  req.path = "/x";
  req.body = "{}";
  req.headers = {{"OPEN-SANDBOX-API-KEY", "k"}};
  req.on_body = [&](absl::string_view piece) {
    body.append(piece.data(), piece.size());
    return true;
  };
  auto res = SendHttp({"127.0.0.1", server.port(), "/base"}, req);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(body, "data: hello world\n");
  const std::string& sent = server.Join();
  EXPECT_THAT(sent, HasSubstr("POST /base/x HTTP/1.1\r\n"));
  EXPECT_THAT(sent, HasSubstr("OPEN-SANDBOX-API-KEY: k\r\n"));
  EXPECT_THAT(sent, HasSubstr("Content-Length: 2\r\n"));
}

TEST(SendHttpTest, ContentLengthAndTheRequestSent) {
  OneShotServer server("HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nnope!trailing");
  HttpRequest req;
  req.method = "DELETE";
  req.path = "/v1/sandboxes/a";
  req.headers = {{"OPEN-SANDBOX-API-KEY", "key"}};
  auto res = SendHttp({"127.0.0.1", server.port(), ""}, req);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(res->body, "nope!");
  EXPECT_THAT(server.Join(), HasSubstr("DELETE /v1/sandboxes/a HTTP/1.1\r\n"));
}

// "localhost" is the loopback even where no /etc/hosts says so (a minimal root has none): the
// request goes through with an empty file bound over /etc/hosts in a mount namespace of its own
// (or with none at all, where the root has no /etc/hosts to hide).
TEST(SendHttpTest, LocalhostNeedsNoHostsFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a mount namespace";
  OneShotServer server("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::access("/etc/hosts", F_OK) == 0) {
      char empty[] = "/tmp/moat-no-hosts-XXXXXX";
      const int fd = ::mkstemp(empty);
      const bool hidden = fd >= 0 && ::unshare(CLONE_NEWNS) == 0 &&
                          ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                          ::mount(empty, "/etc/hosts", nullptr, MS_BIND, nullptr) == 0;
      if (fd >= 0) ::unlink(empty);
      if (!hidden) ::_exit(3);
    }
    HttpRequest req;
    req.path = "/";
    auto res = SendHttp({"localhost", server.port(), ""}, req);
    ::_exit(res.ok() && res->status == 204 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 3) << "could not hide /etc/hosts";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "localhost did not resolve without /etc/hosts";
  if (WEXITSTATUS(status) != 0) {  // Nobody came: release the server's one accept.
    HttpRequest release;
    release.path = "/";
    SendHttp({"127.0.0.1", server.port(), ""}, release).IgnoreError();
  }
  server.Join();
}

TEST(SendHttpTest, NobodyListeningIsUnavailable) {
  HttpRequest req;
  req.path = "/";
  req.timeout = absl::Seconds(2);
  auto res = SendHttp({"127.0.0.1", 1, ""}, req);
  EXPECT_TRUE(absl::IsUnavailable(res.status())) << res.status();
}

}  // namespace
}  // namespace moat::cli
