// The proxy's life cycle and threads. The doors (doors.h) and the proxied request
// (proxied_request.h) do the per-request work; this file accepts, bounds, tracks and stops.
//
//   Start() -> accept thread: poll(listeners, wake_fd_, stop_fd_)
//                 accept4 -> under max_connections: a thread per connection (Serve)
//                         -> over it: refused in the door's protocol, audited, closed
//                 wake_fd_ -> re-read listeners, join finished threads
//   Stop()  -> stop_fd_ readable (every poll in every thread wakes), join the accept thread,
//              shutdown() every tracked socket, join every connection thread, close listeners.
#include "sandbox/egress/proxy.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sandbox/egress/doors.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::egress {
namespace {

// Accepts per listener per wake-up, so one busy listener cannot starve the others.
constexpr int kAcceptBatch = 32;

void SignalEventFd(int fd) {
  const uint64_t one = 1;
  ssize_t n;
  do {
    n = ::write(fd, &one, sizeof(one));
  } while (n < 0 && errno == EINTR);
}

// The relay guards itself against SIGPIPE (relay.cc); the proxy's own threads block it for good
// as well, so no write anywhere in them can kill the supervisor.
void BlockSigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace

EgressProxy::EgressProxy(ProxyConfig config, EgressRules rules, AddressPolicy addresses,
                         Resolver* resolver, AuditSink* audit)
    : config_(std::move(config)),
      rules_(std::move(rules)),
      addresses_(std::move(addresses)),
      audit_(audit),
      limiter_(config_.requests_per_minute),
      check_(&rules_, &addresses_, resolver, &limiter_),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!stop_fd_.valid() || !wake_fd_.valid()) {
    setup_status_ = ErrnoStatus("create the egress proxy's eventfds");
  }
}

EgressProxy::~EgressProxy() { Stop(); }

const char* EgressProxy::ProtocolOf(Door door) {
  switch (door) {
    case Door::kHttp:
      return "http";
    case Door::kSocks:
      return "socks5";
    case Door::kTransparent:
      return "transparent";
  }
  return "";
}

void EgressProxy::AddHttpListener(UniqueFd listener) {
  AddListener(std::move(listener), Door::kHttp, "");
}

void EgressProxy::AddSocksListener(UniqueFd listener) {
  AddListener(std::move(listener), Door::kSocks, "");
}

void EgressProxy::AddTransparentListener(UniqueFd listener, std::string name) {
  AddListener(std::move(listener), Door::kTransparent, std::move(name));
}

void EgressProxy::SetTransparentNames(std::function<std::string(const IpAddress&)> name_of) {
  transparent_names_ = std::move(name_of);
}

std::string EgressProxy::TransparentName(int client) const {
  if (!transparent_names_) return "";
  struct sockaddr_storage local;
  socklen_t length = sizeof(local);
  if (::getsockname(client, reinterpret_cast<struct sockaddr*>(&local), &length) != 0) return "";
  std::optional<IpAddress> address =
      IpAddress::FromSockaddr(reinterpret_cast<const struct sockaddr*>(&local));
  return address ? transparent_names_(*address) : "";
}

void EgressProxy::AddListener(UniqueFd listener, Door door, std::string name) {
  // Non-blocking: a client that resets between poll() and accept4() must not hang the loop.
  const int flags = ::fcntl(listener.get(), F_GETFL);
  if (flags >= 0) ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;  // closed right away, like every listener at Stop()
    listeners_.push_back({std::move(listener), door, std::move(name)});
  }
  Wake();
}

absl::Status EgressProxy::Start() {
  absl::MutexLock stop_lock(&stop_mu_);
  RETURN_IF_ERROR(setup_status_);
  {
    absl::MutexLock lock(&mu_);
    if (started_ || stopping_) {
      return absl::FailedPreconditionError("the egress proxy was already started or stopped");
    }
    started_ = true;
  }
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return absl::OkStatus();
}

void EgressProxy::Stop() {
  absl::MutexLock stop_lock(&stop_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (stop_fd_.valid()) SignalEventFd(stop_fd_.get());
  if (accept_thread_.joinable()) accept_thread_.join();
  // No new connection can start now; wake the ones that are running wherever they block.
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, connection] : connections_) {
      if (connection->client_fd >= 0) ::shutdown(connection->client_fd, SHUT_RDWR);
      if (connection->upstream_fd >= 0) ::shutdown(connection->upstream_fd, SHUT_RDWR);
      threads.push_back(std::move(connection->thread));
    }
  }
  for (std::thread& thread : threads) {
    if (thread.joinable()) thread.join();
  }
  absl::MutexLock lock(&mu_);
  connections_.clear();
  listeners_.clear();
}

void EgressProxy::Wake() {
  if (wake_fd_.valid()) SignalEventFd(wake_fd_.get());
}

void EgressProxy::AcceptLoop() {
  BlockSigpipe();
  for (;;) {
    struct Watched {
      int fd;
      Door door;
      std::string name;
    };
    std::vector<Watched> watched;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      for (const Listener& l : listeners_) watched.push_back({l.fd.get(), l.door, l.name});
    }
    std::vector<struct pollfd> fds;
    fds.push_back({stop_fd_.get(), POLLIN, 0});
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    for (const Watched& w : watched) fds.push_back({w.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      // Only EFAULT/EINVAL/ENOMEM: nothing sensible to do but try again shortly.
      ::usleep(10'000);
      continue;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents != 0) {
      uint64_t drained;
      (void)!::read(wake_fd_.get(), &drained, sizeof(drained));
      ReapFinished();
    }
    for (size_t i = 0; i < watched.size(); ++i) {
      if (fds[i + 2].revents != 0) Accept(watched[i].fd, watched[i].door, watched[i].name);
    }
  }
}

void EgressProxy::Accept(int listener, Door door, const std::string& name) {
  for (int i = 0; i < kAcceptBatch; ++i) {
    UniqueFd client(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client.valid()) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the pending connection stays queued; back off instead of spinning.
        ::usleep(10'000);
      }
      return;  // EAGAIN (drained), ECONNABORTED and the like: poll again
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (live_ < config_.max_connections) {
        const uint64_t id = next_id_++;
        auto connection = std::make_unique<Connection>();
        connection->client_fd = client.get();
        // Started under mu_: the thread's last step (FinishConnection) takes mu_, so it cannot
        // finish before `thread` is stored.
        connection->thread = std::thread([this, id, door, name, fd = client.release()]() mutable {
          Serve(id, UniqueFd(fd), door, std::move(name));
        });
        connections_.emplace(id, std::move(connection));
        ++live_;
        continue;
      }
    }
    RefuseOverLimit(std::move(client), door, name);
  }
}

void EgressProxy::RefuseOverLimit(UniqueFd client, Door door, const std::string& name) {
  AuditRecord record;
  record.time = absl::Now();
  record.sandbox = config_.sandbox_id;
  record.protocol = ProtocolOf(door);
  record.status = 503;
  record.reason =
      absl::StrCat("over max_connections (", config_.max_connections, " connections at once)");
  std::string reply;
  if (door == Door::kHttp) {
    const std::string body = absl::StrCat("moat egress proxy: ", record.reason, "\n");
    reply = absl::StrCat(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; "
        "charset=utf-8\r\nContent-Length: ",
        body.size(), "\r\nConnection: close\r\n\r\n", body);
  } else if (door == Door::kSocks) {
    // "No acceptable methods": the one refusal a SOCKS5 client understands before its greeting.
    reply = {static_cast<char>(5), static_cast<char>(0xff)};
  } else {
    record.host = name;
    record.method = "TCP";
    struct sockaddr_storage local;
    socklen_t length = sizeof(local);
    if (::getsockname(client.get(), reinterpret_cast<struct sockaddr*>(&local), &length) == 0) {
      record.port = ntohs(local.ss_family == AF_INET6
                              ? reinterpret_cast<struct sockaddr_in6*>(&local)->sin6_port
                              : reinterpret_cast<struct sockaddr_in*>(&local)->sin_port);
    }
  }
  // Best effort and never blocking: the socket is non-blocking and the reply tiny.
  if (!reply.empty()) (void)!::send(client.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
  audit_->Record(record);
}

void EgressProxy::Serve(uint64_t id, UniqueFd client, Door door, std::string name) {
  BlockSigpipe();
  {
    ProxiedRequestEnv env{&config_,
                          &check_,
                          audit_,
                          stop_fd_.get(),
                          [this, id](int fd) { return TrackUpstream(id, fd); },
                          [this, id] { UntrackUpstream(id); }};
    ProxiedRequest session(env, client.get(), ProtocolOf(door));
    switch (door) {
      case Door::kHttp:
        ServeHttp(session);
        break;
      case Door::kSocks:
        ServeSocks(session);
        break;
      case Door::kTransparent:
        if (name.empty()) name = TransparentName(client.get());
        if (name.empty()) {
          session.record().method = "TCP";
          struct sockaddr_storage local;
          socklen_t length = sizeof(local);
          if (::getsockname(client.get(), reinterpret_cast<struct sockaddr*>(&local), &length) ==
              0) {
            if (std::optional<IpAddress> address =
                    IpAddress::FromSockaddr(reinterpret_cast<const struct sockaddr*>(&local))) {
              session.record().host = address->ToString();
              session.record().port =
                  ntohs(reinterpret_cast<struct sockaddr_in*>(&local)->sin_port);
            }
          }
          session.RecordRefusal(403, "no allowed name was handed out for this address");
          break;
        }
        ServeTransparent(session, name);
        break;
    }
  }  // the session's audit record is written here
  FinishConnection(id);
  // `client` is closed on return, after FinishConnection() forgot its number.
}

bool EgressProxy::TrackUpstream(uint64_t id, int fd) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  connections_.at(id)->upstream_fd = fd;
  return true;
}

void EgressProxy::UntrackUpstream(uint64_t id) {
  absl::MutexLock lock(&mu_);
  connections_.at(id)->upstream_fd = -1;
}

bool EgressProxy::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void EgressProxy::FinishConnection(uint64_t id) {
  {
    absl::MutexLock lock(&mu_);
    Connection& connection = *connections_.at(id);
    connection.client_fd = -1;
    connection.upstream_fd = -1;
    connection.finished = true;
    --live_;
  }
  Wake();
}

void EgressProxy::ReapFinished() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->second->finished) {
        done.push_back(std::move(it->second->thread));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Each has at most its last few instructions left.
  for (std::thread& thread : done) thread.join();
}

}  // namespace moat::egress
