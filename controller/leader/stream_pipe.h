// A response relayed while it arrives, the one relay of the controller: the proxy to a
// sandbox's execd (controller/proxy.h) and a follower forwarding to the leader
// (leader/forwarder.h) both send their request upstream with RelayUpstream::Start and hand the
// answer on with Sized or Stream, so a server-sent-events stream reaches its client event by
// event. What differs between them is theirs: the request they build, the headers they pass
// on, and the answer when the upstream does not answer (a 502 from the proxy, a 503 from the
// forwarder).
//
//   Start ──▶ thread: httplib::Client::send ──head──▶ Start returns (or on_failure)
//                                          └─chunks─▶ RelayPipe ──▶ Stream's content provider
#pragma once

#include <httplib.h>

#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/http/client_pool.h"

namespace moat::controller {

// Chunks from the upstream response to the client's, with back-pressure: the upstream side
// waits while kMaxBuffered bytes are queued, so a slow client slows the upstream instead of
// growing the controller.
class RelayPipe {
 public:
  static constexpr size_t kMaxBuffered = 1 << 20;

  // False once the client side cancelled: the upstream stops reading.
  bool Push(const char* data, size_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // No more chunks: the upstream's response ended (or failed).
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  // The client went away or was served: Push refuses from now on.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  // The next chunk; false once the upstream's response ended and everything was taken.
  bool Pop(std::string* chunk) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::deque<std::string> chunks_ ABSL_GUARDED_BY(mu_);
  size_t buffered_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// How the upstream is reached.
struct UpstreamOptions {
  std::string url;      // "http://127.0.0.1:8080" or https://...
  std::string ca_file;  // To verify an https upstream (http::TrustCa); empty: the system's CAs.
  absl::Duration connection_timeout = absl::Seconds(2);
  absl::Duration read_timeout = absl::Seconds(90);  // Between two reads, not the whole answer.
  // Kept-alive connections to reuse (the proxy's to the agents); null: one connection per
  // request.
  http::ClientPool* pool = nullptr;
};

class RelayUpstream {
 public:
  // Sends `request` to the upstream on a thread of its own and waits for the answer's head
  // (status and headers). If the upstream did not answer (refused, timed out, reset before a
  // head, a certificate not trusted), calls on_failure with httplib's error and returns
  // nullptr.
  static std::shared_ptr<RelayUpstream> Start(
      const UpstreamOptions& options, httplib::Request request,
      const std::function<void(httplib::Error error)>& on_failure);
  ~RelayUpstream();

  // The upstream's status and headers.
  const httplib::Response& head() const { return head_; }
  // Waits for the whole body and returns it (an answer with a Content-Length).
  std::string Sized();
  // Hands the body to `res` chunk by chunk, as the upstream sends it; `on_chunk` (if set) sees
  // each chunk's size. The upstream is stopped once the client is served or goes away.
  static void Stream(const std::shared_ptr<RelayUpstream>& up, httplib::Response& res,
                     const std::string& content_type,
                     std::function<void(size_t)> on_chunk = nullptr);

 private:
  RelayUpstream() = default;
  void Join();

  RelayPipe pipe_;
  std::promise<httplib::Response> head_promise_;  // Set once, on the upstream's thread.
  bool head_set_ = false;                         // Only the upstream's thread touches it.
  httplib::Response head_;  // Written by Start before anyone reads it, then constant.
  httplib::Error error_ = httplib::Error::Success;  // Why no head came (status 0).
  std::thread thread_;
};

}  // namespace moat::controller
