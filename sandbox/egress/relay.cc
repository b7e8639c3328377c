#include "sandbox/egress/relay.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "util/unique_fd.h"

namespace moat::egress {
namespace {

// Sizes measured with bench/egress_bench (docs/performance.md): a pipe of 1 MiB lets one
// splice() move what a loopback socket holds at once; the upload buffer matches it.
constexpr int kPipeBytes = 1 << 20;
constexpr size_t kUploadBuffer = 256 << 10;

bool WouldBlock(int error) { return error == EAGAIN || error == EWOULDBLOCK; }

std::string Errno(absl::string_view what, int error) {
  return absl::StrCat(what, ": ", std::strerror(error));
}

// splice() into a socket whose peer has gone raises SIGPIPE: unlike send(), it has no
// MSG_NOSIGNAL. While the relay runs the calling thread blocks SIGPIPE, so the signal stays
// pending on the thread and the call fails with EPIPE, which the relay handles; afterwards a
// pending SIGPIPE is taken off the thread before its old mask comes back.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    if (sigismember(&old_, SIGPIPE)) return;
    const struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_;
  sigset_t old_;
};

}  // namespace

RelayResult Relay(int client, int upstream, Sha256* up_hash, const RelayOptions& options,
                  int stop_fd) {
  const SigpipeBlocked sigpipe_blocked;
  RelayResult result;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    result.error = Errno("create the relay's pipe", errno);
    return result;
  }
  const UniqueFd pipe_read(pipe_fds[0]);
  const UniqueFd pipe_write(pipe_fds[1]);
  // Best effort: without it (fs.pipe-max-size, or the user's pipe quota) the pipe keeps its
  // default size and the relay is merely slower.
  int pipe_size = ::fcntl(pipe_write.get(), F_SETPIPE_SZ, kPipeBytes);
  if (pipe_size <= 0) pipe_size = std::max(::fcntl(pipe_write.get(), F_GETPIPE_SZ), 4096);

  const auto buffer = std::make_unique<char[]>(kUploadBuffer);
  size_t up_offset = 0, up_length = 0;  // bytes read from the client, not yet sent upstream
  bool up_eof = !options.upload, up_shut = !options.upload;
  size_t in_pipe = 0;  // bytes spliced from upstream, not yet into the client
  bool down_eof = false, down_shut = false;
  const int poll_ms =
      static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(options.idle_timeout), 1 << 30));

  while (!(up_shut && down_shut)) {
    bool progress = false;
    // client -> upstream
    if (!up_eof && up_length == 0) {
      const ssize_t n = ::recv(client, buffer.get(), kUploadBuffer, 0);
      if (n > 0) {
        if (options.upload_limit != 0 && result.bytes_up + n > options.upload_limit) {
          result.error = absl::StrCat("upload over ", options.upload_limit, " bytes");
          return result;
        }
        up_hash->Update(absl::string_view(buffer.get(), static_cast<size_t>(n)));
        up_offset = 0;
        up_length = static_cast<size_t>(n);
        progress = true;
      } else if (n == 0) {
        up_eof = true;
        progress = true;
      } else if (!WouldBlock(errno) && errno != EINTR) {
        result.error = Errno("read from the client", errno);
        return result;
      }
    }
    if (up_length > 0) {
      const ssize_t n = ::send(upstream, buffer.get() + up_offset, up_length, MSG_NOSIGNAL);
      if (n > 0) {
        up_offset += n;
        up_length -= n;
        result.bytes_up += n;
        progress = true;
      } else if (n < 0 && !WouldBlock(errno) && errno != EINTR) {
        result.error = Errno("write to the destination", errno);
        return result;
      }
    }
    if (up_eof && up_length == 0 && !up_shut) {
      ::shutdown(upstream, SHUT_WR);
      up_shut = true;
    }
    // upstream -> client
    if (!down_eof && in_pipe < static_cast<size_t>(pipe_size)) {
      const ssize_t n = ::splice(upstream, nullptr, pipe_write.get(), nullptr, pipe_size - in_pipe,
                                 SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        in_pipe += n;
        progress = true;
      } else if (n == 0) {
        down_eof = true;
        progress = true;
      } else if (!WouldBlock(errno) && errno != EINTR) {
        result.error = Errno("read from the destination", errno);
        return result;
      }
    }
    if (in_pipe > 0) {
      const ssize_t n = ::splice(pipe_read.get(), nullptr, client, nullptr, in_pipe,
                                 SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        in_pipe -= n;
        result.bytes_down += n;
        progress = true;
      } else if (n < 0 && !WouldBlock(errno) && errno != EINTR) {
        result.error = Errno("write to the client", errno);
        return result;
      }
    }
    if (down_eof && in_pipe == 0 && !down_shut) {
      ::shutdown(client, SHUT_WR);
      down_shut = true;
    }
    if (progress) continue;

    struct pollfd fds[3] = {{client, 0, 0}, {upstream, 0, 0}, {stop_fd, POLLIN, 0}};
    if (!up_eof && up_length == 0) fds[0].events |= POLLIN;
    if (in_pipe > 0) fds[0].events |= POLLOUT;
    if (!down_eof && in_pipe < static_cast<size_t>(pipe_size)) fds[1].events |= POLLIN;
    if (up_length > 0) fds[1].events |= POLLOUT;
    // A socket with nothing to wait for is left out: its POLLHUP or POLLERR (reported whatever
    // the events) would wake poll() again and again with nothing to do. A peer that is gone
    // shows up as an error on the next read or write in the direction that still needs it.
    for (struct pollfd& p : fds) {
      if (p.events == 0) p.fd = -1;
    }
    const int ready = ::poll(fds, stop_fd >= 0 ? 3 : 2, poll_ms);
    if (ready < 0 && errno != EINTR) {
      result.error = Errno("poll the relay", errno);
      return result;
    }
    if (ready == 0) {
      result.error = absl::StrCat("idle for ", absl::FormatDuration(options.idle_timeout));
      return result;
    }
    if (stop_fd >= 0 && fds[2].revents != 0) {
      result.error = "stopped";
      return result;
    }
  }
  return result;
}

}  // namespace moat::egress
