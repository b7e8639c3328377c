#include "controller/leader/stream_pipe.h"

#include <utility>

#include "util/http/client_pool.h"

namespace moat::controller {

bool RelayPipe::Push(const char* data, size_t n) {
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return buffered_ < kMaxBuffered || cancelled_;
  };
  mu_.Await(absl::Condition(&room));
  if (cancelled_) return false;
  chunks_.emplace_back(data, n);
  buffered_ += n;
  return true;
}

void RelayPipe::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

void RelayPipe::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

bool RelayPipe::Pop(std::string* chunk) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !chunks_.empty() || closed_; };
  mu_.Await(absl::Condition(&ready));
  if (chunks_.empty()) return false;
  *chunk = std::move(chunks_.front());
  chunks_.pop_front();
  buffered_ -= chunk->size();
  return true;
}

std::shared_ptr<RelayUpstream> RelayUpstream::Start(
    const UpstreamOptions& options, httplib::Request request,
    const std::function<void(httplib::Error error)>& on_failure) {
  std::shared_ptr<RelayUpstream> up(new RelayUpstream());
  request.response_handler = [up](const httplib::Response& head) {
    up->head_promise_.set_value(head);
    up->head_set_ = true;
    return true;
  };
  request.content_receiver = [up](const char* data, size_t n, uint64_t, uint64_t) {
    return up->pipe_.Push(data, n);
  };
  up->thread_ = std::thread([up, options, request = std::move(request)]() mutable {
    // Without a pool of the caller's, a connection for this request alone.
    http::ClientPool one_shot;
    http::ClientPool& pool = options.pool != nullptr ? *options.pool : one_shot;
    const int64_t connect_us = absl::ToInt64Microseconds(options.connection_timeout);
    const int64_t read_us = absl::ToInt64Microseconds(options.read_timeout);
    httplib::Result sent = pool.Call({options.url, options.ca_file}, [&](httplib::Client& client) {
      client.set_connection_timeout(connect_us / 1'000'000, connect_us % 1'000'000);
      client.set_read_timeout(read_us / 1'000'000, read_us % 1'000'000);
      return http::SendResult(client, request);
    });
    if (!up->head_set_) {
      // No head came through the handler: the whole answer as httplib read it, or the failure
      // (status 0; error_ says why).
      httplib::Response whole;
      whole.status = sent ? sent->status : 0;
      if (sent) {
        whole.headers = sent->headers;
        whole.body = sent->body;
      } else {
        up->error_ = sent.error();
      }
      up->head_promise_.set_value(std::move(whole));
      up->head_set_ = true;
    }
    up->pipe_.Close();
  });
  up->head_ = up->head_promise_.get_future().get();
  if (up->head_.status == 0) {
    up->Join();
    on_failure(up->error_);
    return nullptr;
  }
  return up;
}

RelayUpstream::~RelayUpstream() {
  // The thread holds a reference too: if it drops the last one, it cannot join itself.
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

void RelayUpstream::Join() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::string RelayUpstream::Sized() {
  std::string body = head_.body, chunk;
  while (pipe_.Pop(&chunk)) body += chunk;
  Join();
  return body;
}

void RelayUpstream::Stream(const std::shared_ptr<RelayUpstream>& up, httplib::Response& res,
                           const std::string& content_type, std::function<void(size_t)> on_chunk) {
  res.set_chunked_content_provider(
      content_type,
      [up, on_chunk = std::move(on_chunk)](size_t, httplib::DataSink& sink) {
        std::string chunk;
        if (!up->pipe_.Pop(&chunk)) {
          sink.done();
          return true;
        }
        if (on_chunk) on_chunk(chunk.size());
        return sink.write(chunk.data(), chunk.size());
      },
      [up](bool) {
        // The client went away, or everything was sent: stop the upstream side either way.
        up->pipe_.Cancel();
        up->Join();
      });
}

}  // namespace moat::controller
