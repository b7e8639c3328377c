// A small HTTP/1.1 origin server on a loopback address, for the egress proxy's tests and
// benchmark: one thread per connection, one request per connection, `Connection: close`.
//   GET /bytes/N   -> N bytes of 'x' (the download the benchmark times)
//   anything else  -> "hello from the origin: METHOD PATH\n"
// It keeps every request it saw (head and body) so tests can check what reached it, and what
// did not.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "util/unique_fd.h"

namespace moat::egress::testing {

struct SeenRequest {
  std::string head;
  std::string body;
};

// A listening TCP socket on `address`:`port` (0: any free port).
inline UniqueFd ListenTcp(const std::string& address, uint16_t port, uint16_t* bound_port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd.get(), 512) != 0) {
    return UniqueFd();
  }
  socklen_t length = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &length);
  if (bound_port) *bound_port = ntohs(addr.sin_port);
  return fd;
}

class LoopbackOrigin {
 public:
  explicit LoopbackOrigin(const std::string& address = "127.0.0.1", uint16_t port = 0)
      : listener_(ListenTcp(address, port, &port_)), stop_(::eventfd(0, EFD_CLOEXEC)) {
    if (!listener_.valid()) std::abort();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~LoopbackOrigin() {
    const uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof(one));
    accept_thread_.join();
    std::list<Worker> workers;
    {
      absl::MutexLock lock(&mu_);
      for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
      workers.swap(workers_);
    }
    for (Worker& w : workers) w.thread.join();
  }

  uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }
  std::vector<SeenRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  void AcceptLoop() {
    for (;;) {
      struct pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++connections_;
      absl::MutexLock lock(&mu_);
      // Join the workers that are done, so a long benchmark does not pile up threads.
      for (auto it = workers_.begin(); it != workers_.end();) {
        if (it->done->load()) {
          it->thread.join();
          it = workers_.erase(it);
        } else {
          ++it;
        }
      }
      open_.push_back(fd);
      auto done = std::make_shared<std::atomic<bool>>(false);
      workers_.push_back({std::thread([this, fd, done] {
                            Serve(fd);
                            done->store(true);
                          }),
                          done});
    }
  }

  void Serve(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::string in;
    char buf[65536];
    size_t head_end;
    while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) return Close(fd);
      in.append(buf, n);
    }
    SeenRequest seen{in.substr(0, head_end + 4), in.substr(head_end + 4)};
    size_t length = 0;
    for (absl::string_view line : absl::StrSplit(seen.head, "\r\n")) {
      if (absl::StartsWithIgnoreCase(line, "content-length:")) {
        (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)), &length);
      }
    }
    while (seen.body.size() < length) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      seen.body.append(buf, n);
    }
    const std::vector<std::string> request_line =
        absl::StrSplit(seen.head.substr(0, seen.head.find("\r\n")), ' ');
    const std::string path = request_line.size() > 1 ? request_line[1] : "";
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(seen);
    }
    uint64_t download = 0;
    if (absl::StartsWith(path, "/bytes/") && absl::SimpleAtoi(path.substr(7), &download)) {
      const std::string head = absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", download,
                                            "\r\nConnection: close\r\n\r\n");
      if (SendAll(fd, head.data(), head.size())) {
        static const std::string chunk(1 << 20, 'x');
        while (download > 0) {
          const size_t n = std::min<uint64_t>(download, chunk.size());
          if (!SendAll(fd, chunk.data(), n)) break;
          download -= n;
        }
      }
    } else {
      const std::string body =
          absl::StrCat("hello from the origin: ", request_line[0], " ", path, "\n");
      const std::string response = absl::StrCat(
          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ", body.size(),
          "\r\nConnection: close\r\n\r\n", body);
      SendAll(fd, response.data(), response.size());
    }
    Close(fd);
  }

  static bool SendAll(int fd, const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= n;
    }
    return true;
  }

  void Close(int fd) {
    absl::MutexLock lock(&mu_);
    std::erase(open_, fd);
    ::close(fd);
  }

  uint16_t port_ = 0;  // before listener_: set while listener_ is initialised
  UniqueFd listener_;
  UniqueFd stop_;
  std::thread accept_thread_;
  std::atomic<int> connections_{0};
  absl::Mutex mu_;
  std::vector<int> open_ ABSL_GUARDED_BY(mu_);
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<SeenRequest> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::egress::testing
