// A relay on 127.0.0.1 in front of a real etcd's JSON gateway, for tests: it passes every call
// through unchanged, counts the calls by path (how many round trips an operation costs), and can
// refuse chosen calls with 503, as etcd does while it has no quorum (a failure at the network
// seam that the client and the elector meet as they would meet the real one).
#pragma once

#include <httplib.h>

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "controller/testing/loopback_server.h"

namespace moat::controller::testing {

class EtcdProxy {
 public:
  // `upstream`: one member's client URL ("http://127.0.0.1:PORT").
  explicit EtcdProxy(std::string upstream) : upstream_(std::move(upstream)) {}

  std::string url() const { return server_.url(); }

  // Calls to `path` ("/v3/kv/txn") so far, refused ones included; all paths for "".
  int Calls(const std::string& path = "") const {
    absl::MutexLock lock(&mu_);
    if (!path.empty()) return calls_.contains(path) ? calls_.at(path) : 0;
    int total = 0;
    for (const auto& [p, n] : calls_) total += n;
    return total;
  }
  // The next `n` calls to `path` that arrive after a call to `after` has been answered with 200
  // (at once for an empty `after`) are refused with 503; Refused() counts them.
  void FailNext(std::string path, int n, std::string after = "") {
    absl::MutexLock lock(&mu_);
    fail_path_ = std::move(path);
    fail_count_ = n;
    fail_after_ = std::move(after);
    armed_ = fail_after_.empty();
  }
  int Refused() const {
    absl::MutexLock lock(&mu_);
    return refused_;
  }

 private:
  void Relay(const httplib::Request& req, httplib::Response& res) {
    {
      absl::MutexLock lock(&mu_);
      ++calls_[req.path];
      if (armed_ && fail_count_ > 0 && req.path == fail_path_) {
        --fail_count_;
        ++refused_;
        res.status = 503;
        res.set_content(R"({"error":"injected by the test","code":14})", "application/json");
        return;
      }
    }
    httplib::Client client(upstream_);
    client.set_tcp_nodelay(true);
    client.set_read_timeout(60, 0);  // A campaign blocks until it wins.
    httplib::Result answer = client.Post(req.path, req.body, "application/json");
    if (!answer) {
      res.status = 502;
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      if (answer->status == 200 && req.path == fail_after_) armed_ = true;
    }
    res.status = answer->status;
    res.set_content(answer->body, "application/json");
  }

  const std::string upstream_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
  std::string fail_path_ ABSL_GUARDED_BY(mu_), fail_after_ ABSL_GUARDED_BY(mu_);
  int fail_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  int refused_ ABSL_GUARDED_BY(mu_) = 0;
  // Last: it serves on its own thread from construction on, and stops first.
  LoopbackServer server_{[this](httplib::Server& s) {
    s.Post(R"(/v3/.*)",
           [this](const httplib::Request& req, httplib::Response& res) { Relay(req, res); });
  }};
};

}  // namespace moat::controller::testing
