// The sandbox's DNS server: on the sandbox's own 127.0.0.1:53 (UDP and TCP), run by the
// supervisor outside the sandbox. It never forwards a client's packet: for each question it asks
// the answerer (which applies the policy) and builds a fresh response, so names outside the policy
// get NXDOMAIN without any query leaving the host, and nothing can tunnel through it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "sandbox/egress/dns_message.h"
#include "sandbox/egress/ip_address.h"
#include "sandbox/util/unique_fd.h"

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
  void Serve(int stop_fd);

  static constexpr int kMaxInFlight = 16;

 private:
  UniqueFd udp_;
  UniqueFd tcp_;
  StubAnswerer answerer_;
};

}  // namespace moat::egress
