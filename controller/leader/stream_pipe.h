// A response relayed while it arrives: the upstream side (a thread running httplib's client)
// pushes chunks, the downstream side (httplib's chunked content provider) pops them. The proxy
// to a sandbox's execd and a follower forwarding to the leader both stream this way, so a
// server-sent-events stream reaches its client event by event.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace moat::controller {

// Chunks from the upstream response to the client's, with back-pressure: the upstream side
// waits while kMaxBuffered bytes are queued, so a slow client slows the upstream instead of
// growing the controller.
class RelayPipe {
 public:
  static constexpr size_t kMaxBuffered = 1 << 20;

  bool Push(const char* data, size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return buffered_ < kMaxBuffered || cancelled_; });
    if (cancelled_) return false;
    chunks_.emplace_back(data, n);
    buffered_ += n;
    cv_.notify_all();
    return true;
  }
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  void Cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  // The next chunk; false once the agent's response ended and everything was taken.
  bool Pop(std::string* chunk) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !chunks_.empty() || closed_; });
    if (chunks_.empty()) return false;
    *chunk = std::move(chunks_.front());
    chunks_.pop_front();
    buffered_ -= chunk->size();
    cv_.notify_all();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  size_t buffered_ = 0;
  bool closed_ = false, cancelled_ = false;
};

struct RelayUpstream {
  // Points `out`'s handlers at `up`: the response's head and then its body chunks arrive there
  // as the upstream sends them.
  static void Receive(const std::shared_ptr<RelayUpstream>& up, httplib::Request& out) {
    out.response_handler = [up](const httplib::Response& head) {
      up->head.set_value(head);
      up->head_set = true;
      return true;
    };
    out.content_receiver = [up](const char* data, size_t n, uint64_t, uint64_t) {
      return up->pipe.Push(data, n);
    };
  }

  RelayPipe pipe;
  std::promise<httplib::Response> head;  // Status and headers, once they arrived.
  bool head_set = false;
  std::thread thread;

  ~RelayUpstream() {
    // The thread holds a reference too: if it drops the last one, it cannot join itself.
    if (!thread.joinable()) return;
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else {
      thread.join();
    }
  }
};

}  // namespace moat::controller
