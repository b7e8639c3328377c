#include "util/http/client_pool.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>

#include "util/http/client.h"

namespace moat::http {

bool NeverReachedPeer(httplib::Error error) {
  return error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout ||
         error == httplib::Error::SSLConnection || error == httplib::Error::Write;
}

namespace {

std::unique_ptr<httplib::Client> NewClient(const Peer& peer) {
  auto client = std::make_unique<httplib::Client>(peer.url);
  TrustCa(*client, peer.ca_file);
  client->set_keep_alive(true);
  // httplib writes a request's head and body in two segments: with Nagle's algorithm the body
  // waits for the peer's delayed ACK of the head, ~40 ms on Linux.
  client->set_tcp_nodelay(true);
  return client;
}

}  // namespace

httplib::Result ClientPool::Call(const Peer& peer,
                                 const std::function<httplib::Result(httplib::Client&)>& call) {
  bool reused = false;
  std::unique_ptr<httplib::Client> client = Take(peer, &reused);
  httplib::Result result = call(*client);
  if (!result && reused && NeverReachedPeer(result.error())) {
    // The kept connection broke under the write (the peer restarted, or timed it out just
    // then): nothing reached the peer, so a fresh connection may carry the same request.
    client = NewClient(peer);
    result = call(*client);
  }
  if (result) Give(peer, std::move(client));
  return result;
}

std::unique_ptr<httplib::Client> ClientPool::Take(const Peer& peer, bool* reused) {
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(peer);
    const absl::Time now = absl::Now();
    while (it != idle_.end() && !it->second.empty()) {
      IdleClient last = std::move(it->second.back());
      it->second.pop_back();
      if (now - last.since <= options_.max_idle) {
        *reused = true;
        return std::move(last.client);
      }
      // Too old: closed as it goes (and every older one behind it).
    }
  }
  *reused = false;
  return NewClient(peer);
}

void ClientPool::Give(const Peer& peer, std::unique_ptr<httplib::Client> client) {
  if (options_.max_idle_per_peer == 0) return;  // Keeps none: closed here.
  std::vector<IdleClient> closing;              // Closed after the lock is released.
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  std::vector<IdleClient>& idle = idle_[peer];
  if (idle.size() >= options_.max_idle_per_peer) {
    closing.push_back(std::move(idle.front()));  // The oldest.
    idle.erase(idle.begin());
  }
  idle.push_back({std::move(client), now});
  // Now and then, the connections too old to be reused go, for peers no longer called too (a
  // node gone): otherwise each would hold its socket until the pool is destroyed.
  if (now - last_sweep_ < options_.max_idle) return;
  last_sweep_ = now;
  for (auto& [p, list] : idle_) {
    auto fresh = std::find_if(list.begin(), list.end(), [&](const IdleClient& c) {
      return now - c.since <= options_.max_idle;
    });
    std::move(list.begin(), fresh, std::back_inserter(closing));
    list.erase(list.begin(), fresh);
  }
  std::erase_if(idle_, [](const auto& entry) { return entry.second.empty(); });
}

size_t ClientPool::Idle() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [peer, idle] : idle_) n += idle.size();
  return n;
}

httplib::Result SendResult(httplib::Client& client, httplib::Request& request) {
  auto response = std::make_unique<httplib::Response>();
  httplib::Error error = httplib::Error::Success;
  if (!client.send(request, *response, error)) return httplib::Result(nullptr, error);
  return httplib::Result(std::move(response), error);
}

}  // namespace moat::http
