// The sandbox's DNS server: on the sandbox's own 127.0.0.1:53 (UDP and TCP), run by the
// supervisor outside the sandbox. It never forwards a client's packet: for each question it asks
// the answerer (which applies the policy) and builds a fresh response, so names outside the policy
// get NXDOMAIN without any query leaving the host, and nothing can tunnel through it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "sandbox/egress/dns_message.h"
#include "sandbox/values/ip_address.h"
#include "util/unique_fd.h"

namespace moat::egress {

struct StubAnswer {
  uint8_t rcode = kDnsNoError;       // kDnsNxDomain for names outside the policy
  std::vector<IpAddress> addresses;  // for A / AAAA questions
  uint32_t ttl = 30;
};

// Called for every well-formed question, possibly from several threads at once; may block (an
// upstream lookup). Malformed queries get FORMERR without reaching it.
using StubAnswerer = std::function<StubAnswer(const DnsQuestion& question)>;

class DnsStub {
 public:
  // `udp`: a bound UDP socket; `tcp`: a listening TCP socket, or invalid for UDP only.
  DnsStub(UniqueFd udp, UniqueFd tcp, StubAnswerer answerer);

  // Serves until `stop_fd` is readable, answering up to kMaxInFlight questions at once so one
  // slow upstream lookup does not stall the others; returns when all of them have finished.
  //
  // When kMaxInFlight questions are being answered, the stub stops reading the UDP socket (and
  // TCP connections wait before asking the answerer) until one finishes: queries queue in the
  // kernel's socket buffer rather than getting SERVFAIL, which clients would take as a final
  // failure. A flood only fills that buffer, and the kernel drops the excess.
  //
  // TCP: up to kMaxTcpConnections at once (more are accepted and closed at once), each served
  // on its own thread, messages framed by a 2-byte length (RFC 7766), each message to arrive
  // within kTcpReadTimeoutSeconds of the previous answer or the connection is closed.
  void Serve(int stop_fd);

  static constexpr int kMaxInFlight = 16;
  static constexpr int kMaxTcpConnections = 8;
  static constexpr int kTcpReadTimeoutSeconds = 5;

 private:
  // What a message calls for: nothing (not even a header, or a response: answering those could
  // make two servers bounce packets forever), an immediate reply (FORMERR, NOTIMP, REFUSED), or
  // a question for the answerer.
  struct Triage {
    std::optional<std::vector<uint8_t>> reply;
    std::optional<DnsQuery> query;
  };
  static Triage Classify(absl::Span<const uint8_t> message, bool cut);
  // The answerer's decision as a response of at most `max_size` bytes (TC set if cut short).
  std::vector<uint8_t> Answer(const DnsQuery& query, size_t max_size);

  // Serve thread only.
  void ReceiveUdp();
  void AcceptTcp(int stop_fd);
  void Spawn(std::function<void()> body);
  void JoinFinished();
  void JoinAll();

  void ServeConnection(UniqueFd connection, int stop_fd);

  bool TryReserveSlot();
  void AcquireSlot();
  void ReleaseSlot();
  bool SlotFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ < kMaxInFlight;
  }
  // Wakes the Serve loop (a slot freed, a worker ended).
  void Wake();

  UniqueFd udp_;
  UniqueFd tcp_;
  StubAnswerer answerer_;
  // An eventfd the workers signal; set by Serve before any worker starts and closed after all
  // have been joined, so workers read it without the lock.
  int wake_fd_ = -1;
  // The worker threads, touched by the Serve thread only.
  std::map<uint64_t, std::thread> workers_;
  uint64_t next_worker_ = 0;

  // Shared between the Serve thread and the workers.
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;               // questions with the answerer
  int tcp_connections_ ABSL_GUARDED_BY(mu_) = 0;         // connection threads alive
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);  // workers done, to be joined
};

}  // namespace moat::egress
