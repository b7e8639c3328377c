// An httplib server on 127.0.0.1 for tests, on a port the kernel picks (or `port`: a server
// restarted where the last one was), serving `routes` on a thread of its own until destroyed.
#pragma once

#include <httplib.h>

#include <functional>
#include <string>
#include <thread>

namespace moat::controller::testing {

class LoopbackServer {
 public:
  explicit LoopbackServer(const std::function<void(httplib::Server&)>& routes, int port = 0) {
    routes(server_);
    port_ = port == 0 ? server_.bind_to_any_port("127.0.0.1")
                      : (server_.bind_to_port("127.0.0.1", port) ? port : -1);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~LoopbackServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  httplib::Server server_;
  int port_;
  std::thread thread_;
};

}  // namespace moat::controller::testing
