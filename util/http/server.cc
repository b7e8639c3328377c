#include "util/http/server.h"

#include <sys/socket.h>

#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "util/http/reply.h"
#include "util/log.h"

namespace moat::http {

absl::StatusOr<std::unique_ptr<httplib::Server>> MakeServer(
    absl::string_view cert_file, absl::string_view key_file,
    const std::function<std::unique_ptr<httplib::Server>()>& plain) {
  if (cert_file.empty()) {
    return plain ? plain() : std::make_unique<httplib::Server>();
  }
  auto tls = std::make_unique<httplib::SSLServer>(std::string(cert_file).c_str(),
                                                  std::string(key_file).c_str());
  if (!tls->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load the TLS certificate \"", cert_file,
                                                   "\" or key \"", key_file,
                                                   "\"; check that both exist, are PEM and match"));
  }
  return tls;
}

void ConfigureServer(httplib::Server& server, const ServerIdentity& identity) {
  // Small writes (SSE events, short JSON answers) go out at once: with Nagle's algorithm a
  // response's second segment waits for the client's delayed ACK, 40 ms on Linux.
  server.set_tcp_nodelay(true);
  // httplib's default is SO_REUSEPORT, which lets a second daemon (or any root process) bind the
  // same port and silently take half the connections. SO_REUSEADDR alone still allows a quick
  // restart (TIME_WAIT) but makes a second bind fail with EADDRINUSE.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // httplib calls this for every response >= 400; the routes' own carry a JSON body already.
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [identity](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = "bad request";
        if (res.status == 413) {
          message =
              absl::StrCat("the request body is larger than ", identity.max_request_bytes,
                           " bytes (the ", identity.daemon, "'s api.max_request_bytes); send less");
        } else if (res.status == 404) {
          message = absl::StrCat("no such endpoint; see ", identity.api_doc);
        } else if (auto it = identity.messages.find(res.status); it != identity.messages.end()) {
          message = it->second;
        }
        SendError(res, res.status, message);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server.set_exception_handler([daemon = identity.daemon](const httplib::Request& req,
                                                          httplib::Response& res,
                                                          std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    LogError(absl::StrCat("handler for ", req.method, " ", req.path, " threw: ", what));
    SendError(res, 500, absl::StrCat("internal error; the ", daemon, "'s log has details"));
  });
}

absl::StatusOr<int> ServerThread::Start(const std::string& address, int port) {
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(address);
  } else if (!server_->bind_to_port(address, port)) {
    bound = -1;
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ":", port,
                     "; is another process using the port, or is the address not local?"));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib 0.11 has no wait_until_ready(); listen_after_bind sets is_running() first thing.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool tls = dynamic_cast<httplib::SSLServer*>(server_) != nullptr;
  LogInfo(absl::StrCat("listening on ", address, ":", bound, tls ? " (TLS)" : ""));
  return bound;
}

void ServerThread::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace moat::http
