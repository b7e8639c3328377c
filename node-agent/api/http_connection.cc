#include "node-agent/api/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace moat::agent {
namespace {

// Milliseconds for poll(2), from httplib's (seconds, microseconds) pairs.
int PollMillis(time_t sec, time_t usec) {
  return static_cast<int>(std::min<long long>(sec * 1000LL + usec / 1000, 1 << 30));
}

// One connection: reads through a buffer that lives as long as the connection, so bytes of a
// pipelined request read along with the one before are kept for it.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, int read_ms, int write_ms)
      : sock_(sock), read_ms_(read_ms), write_ms_(write_ms) {}

  bool buffered() const { return pos_ < len_; }
  RequestHeadScanner& scanner() { return scanner_; }

  // Until a request's first byte is here (true), or `timeout_sec` passes, the peer closes, or
  // the server stops (false). Looks at `server_socket` often so that stop() is not held up.
  bool WaitForRequest(const std::atomic<socket_t>& server_socket, time_t timeout_sec) {
    if (buffered()) return true;
    const int slices = static_cast<int>(std::max<time_t>(1, timeout_sec * 10));
    for (int i = 0; i < slices && server_socket != INVALID_SOCKET; ++i) {
      struct pollfd p = {.fd = sock_, .events = POLLIN, .revents = 0};
      int n = ::poll(&p, 1, 100);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      if (n > 0) return (p.revents & POLLIN) != 0;
    }
    return false;
  }

  bool is_readable() const override { return buffered() || Poll(POLLIN, read_ms_); }
  bool is_writable() const override { return Poll(POLLOUT, write_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (!buffered()) {
      if (!Poll(POLLIN, read_ms_)) return -1;
      // A large read (a body) goes straight to the caller; small ones (httplib reads the head a
      // byte at a time) through the buffer.
      char* into = size >= sizeof(buffer_) ? ptr : buffer_;
      size_t room = size >= sizeof(buffer_) ? size : sizeof(buffer_);
      ssize_t n;
      do {
        n = ::recv(sock_, into, room, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      if (into == ptr) {
        scanner_.Scan(ptr, static_cast<size_t>(n));
        return n;
      }
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buffer_ + pos_, n);
    pos_ += n;
    scanner_.Scan(ptr, n);
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(::getsockname, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  bool Poll(short events, int timeout_ms) const {
    struct pollfd p = {.fd = sock_, .events = events, .revents = 0};
    int n;
    do {
      n = ::poll(&p, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    // A hang-up with data still to read is readable; for writing it is the end.
    if (events == POLLOUT) return (p.revents & (POLLERR | POLLHUP)) == 0;
    return (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }

  void Address(int (*name)(int, struct sockaddr*, socklen_t*), std::string& ip, int& port) const {
    struct sockaddr_storage addr = {};
    socklen_t len = sizeof(addr);
    ip.clear();
    port = 0;
    if (name(sock_, reinterpret_cast<struct sockaddr*>(&addr), &len) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
      auto* in = reinterpret_cast<struct sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      port = ntohs(in->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* in6 = reinterpret_cast<struct sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      port = ntohs(in6->sin6_port);
    }
    ip = text;
  }

  const socket_t sock_;
  const int read_ms_, write_ms_;
  char buffer_[4096];
  size_t pos_ = 0, len_ = 0;
  RequestHeadScanner scanner_;
};

thread_local ConnectionStream* current_stream = nullptr;

}  // namespace

void RequestHeadScanner::Begin() {
  in_head_ = true;
  malformed_ = false;
  after_cr_ = false;
  line_length_ = 0;
}

void RequestHeadScanner::Scan(const char* data, size_t size) {
  for (size_t i = 0; i < size && in_head_; ++i) {
    const unsigned char c = static_cast<unsigned char>(data[i]);
    if (after_cr_) {
      after_cr_ = false;
      if (c != '\n') {
        malformed_ = true;  // A CR not followed by LF.
      }
    }
    if (c == '\n') {
      // An empty line ends the head (httplib, like most servers, also takes a bare LF).
      if (line_length_ == 0) in_head_ = false;
      line_length_ = 0;
      continue;
    }
    if (c == '\r') {
      after_cr_ = true;
      continue;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f) malformed_ = true;
    ++line_length_;
  }
}

bool ConnectionServer::CurrentRequestMalformed() {
  return current_stream != nullptr && current_stream->scanner().malformed();
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  ConnectionStream stream(sock, PollMillis(read_timeout_sec_, read_timeout_usec_),
                          PollMillis(write_timeout_sec_, write_timeout_usec_));
  current_stream = &stream;
  bool ret = false;
  for (size_t count = keep_alive_max_count_;
       count > 0 && stream.WaitForRequest(svr_sock_, keep_alive_timeout_sec_); --count) {
    stream.scanner().Begin();
    bool connection_closed = false;
    ret = process_request(stream, /*close_connection=*/count == 1, connection_closed, nullptr);
    // What follows a malformed head cannot be trusted to be framed as httplib read it.
    if (!ret || connection_closed || stream.scanner().malformed()) break;
  }
  current_stream = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace moat::agent
