#include "sandbox/egress/dns_stub.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sandbox/egress/dns_message.h"
#include "util/unique_fd.h"

namespace moat::egress {
namespace {

// RFC 1035 4.2.1: without EDNS, a UDP message has at most 512 bytes; longer answers are cut and
// flagged TC so the client asks again over TCP.
constexpr size_t kMaxUdpResponse = 512;
constexpr size_t kMaxTcpMessage = 65535;
// Queries are small; anything longer than this is not one we need to read whole.
constexpr size_t kMaxUdpQuery = 4096;

// The poll period of the Serve loop if no eventfd could be made (workers cannot wake it then).
constexpr int kFallbackPollMillis = 20;

// A reply with only a header, for queries whose question we could not (or will not) read: the
// id, opcode and RD echoed, no question (RFC 1035 allows that for errors).
std::vector<uint8_t> HeaderOnlyReply(absl::Span<const uint8_t> message, uint8_t rcode) {
  const uint16_t flags = static_cast<uint16_t>(message[2] << 8 | message[3]);
  const uint16_t reply_flags = kDnsFlagQr | (flags & (kDnsOpcodeMask << kDnsOpcodeShift)) |
                               (flags & kDnsFlagRd) | kDnsFlagRa | rcode;
  std::vector<uint8_t> reply(kDnsHeaderSize, 0);
  reply[0] = message[0];
  reply[1] = message[1];
  reply[2] = static_cast<uint8_t>(reply_flags >> 8);
  reply[3] = static_cast<uint8_t>(reply_flags);
  return reply;
}

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int PollMillis(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

// Waits for `events` on `fd`; false on timeout, on error, or when `stop_fd` becomes readable.
bool WaitOrStop(int fd, short events, int stop_fd, absl::Time deadline) {
  for (;;) {
    pollfd entries[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int ready = poll(entries, 2, PollMillis(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || entries[1].revents != 0) return false;
    return true;
  }
}

bool ReadFull(int fd, absl::Span<uint8_t> bytes, int stop_fd, absl::Time deadline) {
  while (!bytes.empty()) {
    const ssize_t n = recv(fd, bytes.data(), bytes.size(), 0);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitOrStop(fd, POLLIN, stop_fd, deadline)) return false;
    } else {
      return false;  // end of stream or error
    }
  }
  return true;
}

bool WriteFull(int fd, absl::Span<const uint8_t> bytes, int stop_fd, absl::Time deadline) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitOrStop(fd, POLLOUT, stop_fd, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

DnsStub::DnsStub(UniqueFd udp, UniqueFd tcp, StubAnswerer answerer)
    : udp_(std::move(udp)), tcp_(std::move(tcp)), answerer_(std::move(answerer)) {}

DnsStub::Triage DnsStub::Classify(absl::Span<const uint8_t> message, bool cut) {
  Triage triage;
  if (message.size() < kDnsHeaderSize) return triage;
  const uint16_t flags = static_cast<uint16_t>(message[2] << 8 | message[3]);
  if (flags & kDnsFlagQr) return triage;
  if (((flags >> kDnsOpcodeShift) & kDnsOpcodeMask) != 0) {
    triage.reply = HeaderOnlyReply(message, kDnsNotImp);
    return triage;
  }
  absl::StatusOr<DnsQuery> query = ParseDnsQuery(message);
  if (cut || !query.ok()) {
    triage.reply = HeaderOnlyReply(message, kDnsFormErr);
    return triage;
  }
  if (query->question.klass != kDnsClassIn) {
    // CHAOS ("version.bind") and the like: nothing the policy speaks about.
    triage.reply = BuildDnsResponse(*query, kDnsRefused, {}, 0);
    return triage;
  }
  triage.query = std::move(*query);
  return triage;
}

std::vector<uint8_t> DnsStub::Answer(const DnsQuery& query, size_t max_size) {
  const StubAnswer answer = answerer_(query.question);
  const uint8_t rcode = answer.rcode & 0xF;
  std::vector<uint8_t> response = BuildDnsResponse(query, rcode, answer.addresses, answer.ttl);
  if (response.size() <= max_size) return response;
  // Too many addresses: keep as many as fit and set TC (RFC 2181 9), so a UDP client retries over
  // TCP. BuildDnsResponse writes 16 bytes per A record and 28 per AAAA record.
  std::vector<IpAddress> matching;
  for (const IpAddress& address : answer.addresses) {
    if (address.is_v4() == (query.question.type == kDnsTypeA)) matching.push_back(address);
  }
  const size_t record_size = query.question.type == kDnsTypeA ? 16 : 28;
  const size_t fixed = response.size() - matching.size() * record_size;
  const size_t fit = fixed >= max_size ? 0 : (max_size - fixed) / record_size;
  matching.resize(std::min(fit, matching.size()));
  response = BuildDnsResponse(query, rcode, matching, answer.ttl);
  response[2] |= kDnsFlagTc >> 8;  // TC within the header's third byte
  return response;
}

bool DnsStub::TryReserveSlot() {
  absl::MutexLock lock(&mu_);
  if (!SlotFreeLocked()) return false;
  ++in_flight_;
  return true;
}

void DnsStub::AcquireSlot() {
  mu_.LockWhen(absl::Condition(this, &DnsStub::SlotFreeLocked));
  ++in_flight_;
  mu_.Unlock();
}

void DnsStub::ReleaseSlot() {
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
  Wake();  // the Serve loop may have stopped reading UDP while all slots were taken
}

void DnsStub::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  // A full counter (impossible in practice) would only mean the loop is already awake.
  (void)!write(wake_fd_, &one, sizeof(one));
}

void DnsStub::Spawn(std::function<void()> body) {
  const uint64_t id = next_worker_++;
  workers_.emplace(id, std::thread([this, id, body = std::move(body)] {
                     body();
                     {
                       absl::MutexLock lock(&mu_);
                       finished_.push_back(id);
                     }
                     Wake();
                   }));
}

void DnsStub::JoinFinished() {
  std::vector<uint64_t> finished;
  {
    absl::MutexLock lock(&mu_);
    finished.swap(finished_);
  }
  for (uint64_t id : finished) {
    auto it = workers_.find(id);
    if (it == workers_.end()) continue;
    it->second.join();  // the thread has done its work; this only waits for it to exit
    workers_.erase(it);
  }
}

void DnsStub::JoinAll() {
  for (auto& [id, thread] : workers_) thread.join();
  workers_.clear();
  absl::MutexLock lock(&mu_);
  finished_.clear();
}

void DnsStub::ReceiveUdp() {
  if (!TryReserveSlot()) return;  // a TCP connection took the last slot; poll again later
  std::vector<uint8_t> buffer(kMaxUdpQuery);
  sockaddr_storage peer;
  socklen_t peer_length = sizeof(peer);
  const ssize_t n = recvfrom(udp_.get(), buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_TRUNC,
                             reinterpret_cast<sockaddr*>(&peer), &peer_length);
  if (n < 0) {  // EAGAIN, or an ICMP error left by an earlier reply: nothing to answer
    ReleaseSlot();
    return;
  }
  const bool cut = static_cast<size_t>(n) > buffer.size();
  buffer.resize(std::min(buffer.size(), static_cast<size_t>(n)));
  Triage triage = Classify(buffer, cut);
  if (!triage.query.has_value()) {
    if (triage.reply.has_value()) {
      sendto(udp_.get(), triage.reply->data(), triage.reply->size(), MSG_DONTWAIT | MSG_NOSIGNAL,
             reinterpret_cast<const sockaddr*>(&peer), peer_length);
    }
    ReleaseSlot();
    return;
  }
  Spawn([this, query = std::move(*triage.query), peer, peer_length] {
    const std::vector<uint8_t> response = Answer(query, kMaxUdpResponse);
    sendto(udp_.get(), response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
           reinterpret_cast<const sockaddr*>(&peer), peer_length);
    ReleaseSlot();
  });
}

void DnsStub::AcceptTcp(int stop_fd) {
  UniqueFd connection(accept4(tcp_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!connection) return;
  {
    absl::MutexLock lock(&mu_);
    // Over the cap: closing at once (rather than leaving it in the backlog) tells the client.
    if (tcp_connections_ >= kMaxTcpConnections) return;
    ++tcp_connections_;
  }
  Spawn([this, connection = std::make_shared<UniqueFd>(std::move(connection)), stop_fd] {
    ServeConnection(std::move(*connection), stop_fd);
    absl::MutexLock lock(&mu_);
    --tcp_connections_;
  });
}

void DnsStub::ServeConnection(UniqueFd connection, int stop_fd) {
  for (;;) {
    const absl::Time deadline = absl::Now() + absl::Seconds(kTcpReadTimeoutSeconds);
    uint8_t length_bytes[2];
    if (!ReadFull(connection.get(), absl::MakeSpan(length_bytes), stop_fd, deadline)) return;
    std::vector<uint8_t> message(static_cast<size_t>(length_bytes[0] << 8 | length_bytes[1]));
    if (!ReadFull(connection.get(), absl::MakeSpan(message), stop_fd, deadline)) return;
    Triage triage = Classify(message, /*cut=*/false);
    std::vector<uint8_t> response;
    if (triage.query.has_value()) {
      AcquireSlot();
      response = Answer(*triage.query, kMaxTcpMessage);
      ReleaseSlot();
    } else if (triage.reply.has_value()) {
      response = std::move(*triage.reply);
    } else {
      return;  // no header, or a response: this is no DNS client
    }
    std::vector<uint8_t> framed = {static_cast<uint8_t>(response.size() >> 8),
                                   static_cast<uint8_t>(response.size())};
    framed.insert(framed.end(), response.begin(), response.end());
    const absl::Time write_deadline = absl::Now() + absl::Seconds(kTcpReadTimeoutSeconds);
    if (!WriteFull(connection.get(), framed, stop_fd, write_deadline)) return;
  }
}

void DnsStub::Serve(int stop_fd) {
  SetNonBlocking(udp_.get());
  if (tcp_) SetNonBlocking(tcp_.get());
  UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  wake_fd_ = wake.get();

  for (;;) {
    JoinFinished();
    bool take_udp;
    {
      absl::MutexLock lock(&mu_);
      take_udp = SlotFreeLocked();
    }
    pollfd entries[4];
    nfds_t count = 0;
    entries[count++] = {stop_fd, POLLIN, 0};
    const nfds_t wake_index = count;
    if (wake) entries[count++] = {wake.get(), POLLIN, 0};
    const nfds_t udp_index = count;
    if (take_udp) entries[count++] = {udp_.get(), POLLIN, 0};
    const nfds_t tcp_index = count;
    if (tcp_) entries[count++] = {tcp_.get(), POLLIN, 0};

    const int ready = poll(entries, count, wake ? -1 : kFallbackPollMillis);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;  // a bad descriptor set; nothing sensible to serve
    }
    if (entries[0].revents != 0) break;  // readable, hung up or invalid: stop either way
    if (wake && entries[wake_index].revents != 0) {
      uint64_t ignored;
      (void)!read(wake.get(), &ignored, sizeof(ignored));
    }
    if (take_udp && entries[udp_index].revents != 0) ReceiveUdp();
    if (tcp_ && entries[tcp_index].revents != 0) AcceptTcp(stop_fd);
  }

  // Connection threads see stop_fd too and end at their next wait; questions with the answerer
  // end when it returns.
  JoinAll();
  wake_fd_ = -1;
}

}  // namespace moat::egress
