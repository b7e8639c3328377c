// What the controller's and the agent's HTTP servers share, below their routes: making the
// server (TLS or plain), the settings and error pages every route relies on, and the thread it
// listens on. Routes, authentication and body limits stay with each daemon.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::http {

// An HTTPS server with the PEM certificate and key when `cert_file` is set, else `plain()` (the
// agent's serves a plain connection loop of its own). A certificate or key that cannot be
// loaded is an InvalidArgument naming both files.
absl::StatusOr<std::unique_ptr<httplib::Server>> MakeServer(
    absl::string_view cert_file, absl::string_view key_file,
    const std::function<std::unique_ptr<httplib::Server>()>& plain = nullptr);

// Whose server it is, for the pages httplib answers itself (no route, a body over its cap, a
// bad request line) and for a handler that throws.
struct ServerIdentity {
  std::string daemon;   // "controller": "... the controller's log has details"
  std::string api_doc;  // "api/controller.yaml": where a 404 sends the reader
  uint64_t max_request_bytes = 0;
  // Messages for other statuses httplib may answer without a body (the agent's 416).
  absl::flat_hash_map<int, std::string> messages;
};

// Small writes go out at once (TCP_NODELAY), the port is not shared (SO_REUSEADDR only), every
// error httplib answers itself gets a {"code", "message"} body, and a handler that throws is
// logged and answered with a 500 instead of ending the process.
void ConfigureServer(httplib::Server& server, const ServerIdentity& identity);

// Listens on its own thread; Stop() (or destruction) stops accepting, lets running handlers
// finish and joins.
class ServerThread {
 public:
  explicit ServerThread(httplib::Server* server) : server_(server) {}
  ~ServerThread() { Stop(); }
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;

  // Binds address:port (0: any free port) and starts listening; the port bound.
  absl::StatusOr<int> Start(const std::string& address, int port);
  // Idempotent.
  void Stop();

 private:
  httplib::Server* server_;
  std::thread thread_;
};

}  // namespace moat::http
