#include "sandbox/egress/resolver.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sandbox/egress/dns_message.h"
#include "util/errno_status.h"
#include "util/status_macros.h"
#include "util/unique_fd.h"

namespace moat::egress {
namespace {

constexpr char kResolvConf[] = "/etc/resolv.conf";
// Large enough for any UDP datagram; longer ones are cut by the kernel and then fail to parse.
constexpr size_t kMaxUdpMessage = 65535;

// "example.com" or "example.com.": 1 to 253 bytes, labels of 1 to 63 bytes. The caller has
// canonicalised the name already; this only keeps BuildDnsQuery from having to mangle it.
absl::StatusOr<std::string> QueryName(absl::string_view name) {
  if (absl::EndsWith(name, ".")) name.remove_suffix(1);
  if (name.empty() || name.size() > 253) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve \"", name, "\": a name has 1 to 253 bytes"));
  }
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    if (label.empty() || label.size() > 63) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve \"", name, "\": labels have 1 to 63 bytes"));
    }
  }
  return std::string(name);
}

absl::StatusOr<uint16_t> RandomId() {
  uint16_t id = 0;
  if (getrandom(&id, sizeof(id), 0) != sizeof(id)) {
    return ErrnoStatus("getrandom for a DNS query id", errno);
  }
  return id;
}

absl::StatusOr<UniqueFd> ConnectedSocket(const DnsServer& server, int type) {
  sockaddr_storage address;
  const socklen_t length = server.address.ToSockaddr(server.port, &address);
  UniqueFd fd(socket(address.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus(absl::StrCat("socket for DNS server ", server.ToString()), errno);
  // For UDP this only fixes the peer: the kernel picks a random source port and drops datagrams
  // from any other address. For TCP it starts the handshake.
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0 &&
      errno != EINPROGRESS) {
    return ErrnoStatus(absl::StrCat("connect to DNS server ", server.ToString()), errno);
  }
  return fd;
}

int PollMillis(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
}

// Waits until `fd` has `events`, or the deadline passes (DeadlineExceeded).
absl::Status WaitFor(int fd, short events, absl::Time deadline, absl::string_view what) {
  for (;;) {
    pollfd entry = {fd, events, 0};
    const int ready = poll(&entry, 1, PollMillis(deadline));
    if (ready > 0) return absl::OkStatus();
    if (ready == 0) return absl::DeadlineExceededError(absl::StrCat("timed out in ", what));
    if (errno != EINTR) return ErrnoStatus(absl::StrCat("poll in ", what), errno);
  }
}

absl::Status WriteAll(int fd, absl::Span<const uint8_t> bytes, absl::Time deadline) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, "sending over TCP"));
    } else {
      return ErrnoStatus("send over TCP", errno);
    }
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, absl::Span<uint8_t> bytes, absl::Time deadline) {
  while (!bytes.empty()) {
    const ssize_t n = recv(fd, bytes.data(), bytes.size(), 0);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
    } else if (n == 0) {
      return absl::UnavailableError("connection closed before the whole response");
    } else if (errno == EAGAIN || errno == EINTR) {
      RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, "receiving over TCP"));
    } else {
      return ErrnoStatus("recv over TCP", errno);
    }
  }
  return absl::OkStatus();
}

// Whether `response` answers the query we sent: same id and same question. Anything else is
// ignored (a late answer to an earlier query, or an off-path guess).
bool Answers(const DnsResponse& response, uint16_t id, absl::string_view name, uint16_t type) {
  return response.id == id && response.question.type == type &&
         response.question.klass == kDnsClassIn &&
         absl::EqualsIgnoreCase(response.question.name, name);
}

std::string TypeName(uint16_t type) { return type == kDnsTypeA ? "A" : "AAAA"; }

std::string RcodeName(uint8_t rcode) {
  switch (rcode) {
    case kDnsFormErr:
      return "FORMERR";
    case kDnsServFail:
      return "SERVFAIL";
    case kDnsNotImp:
      return "NOTIMP";
    case kDnsRefused:
      return "REFUSED";
    default:
      return absl::StrCat("rcode ", rcode);
  }
}

// RFC 7766: the same question over TCP, each message preceded by its 2-byte length.
absl::StatusOr<DnsResponse> TcpExchange(const DnsServer& server, absl::string_view name,
                                        uint16_t type, absl::Time deadline) {
  ASSIGN_OR_RETURN(uint16_t id, RandomId());
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectedSocket(server, SOCK_STREAM));
  RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, "connecting over TCP"));
  int error = 0;
  socklen_t error_length = sizeof(error);
  if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &error_length) != 0) error = errno;
  if (error != 0) return ErrnoStatus("connect over TCP", error);

  const std::vector<uint8_t> query = BuildDnsQuery(id, name, type);
  std::vector<uint8_t> framed = {static_cast<uint8_t>(query.size() >> 8),
                                 static_cast<uint8_t>(query.size())};
  framed.insert(framed.end(), query.begin(), query.end());
  RETURN_IF_ERROR(WriteAll(fd.get(), framed, deadline));

  uint8_t length_bytes[2];
  RETURN_IF_ERROR(ReadAll(fd.get(), absl::MakeSpan(length_bytes), deadline));
  std::vector<uint8_t> message(static_cast<size_t>(length_bytes[0] << 8 | length_bytes[1]));
  RETURN_IF_ERROR(ReadAll(fd.get(), absl::MakeSpan(message), deadline));
  ASSIGN_OR_RETURN(DnsResponse response, ParseDnsResponse(message));
  if (!Answers(response, id, name, type)) {
    return absl::UnavailableError("the TCP response does not match the query");
  }
  if (response.truncated) return absl::UnavailableError("truncated response over TCP");
  return response;
}

// One question (A or AAAA) to one server over UDP.
struct Exchange {
  uint16_t type = 0;
  uint16_t id = 0;
  UniqueFd fd;
  bool finished = false;
  std::optional<DnsResponse> response;  // set when finished with an answer
  std::string error;                    // set when finished without one
};

void Fail(Exchange& exchange, std::string error) {
  exchange.finished = true;
  exchange.fd.reset();
  exchange.error = std::move(error);
}

// Reads every pending datagram of `exchange`, finishing it on the first one that answers it.
void Receive(Exchange& exchange, const DnsServer& server, absl::string_view name,
             absl::Duration timeout) {
  std::vector<uint8_t> buffer(kMaxUdpMessage);
  while (!exchange.finished) {
    const ssize_t n = recv(exchange.fd.get(), buffer.data(), buffer.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      // ECONNREFUSED: an ICMP port unreachable, nothing listens there. No reason to wait.
      Fail(exchange, std::string(ErrnoStatus("recv", errno).message()));
      return;
    }
    absl::StatusOr<DnsResponse> response =
        ParseDnsResponse(absl::MakeConstSpan(buffer.data(), static_cast<size_t>(n)));
    if (!response.ok() || !Answers(*response, exchange.id, name, exchange.type)) continue;
    if (response->truncated) {
      absl::StatusOr<DnsResponse> full =
          TcpExchange(server, name, exchange.type, absl::Now() + timeout);
      if (!full.ok()) {
        Fail(exchange,
             absl::StrCat("truncated over UDP, then over TCP: ", full.status().message()));
        return;
      }
      response = std::move(full);
    }
    exchange.finished = true;
    exchange.fd.reset();
    exchange.response = std::move(*response);
  }
}

// Asks one server for both address types: addresses, NotFound (NXDOMAIN, or no address
// records), or Unavailable when it did not give a usable answer.
absl::StatusOr<std::vector<IpAddress>> AskServer(const DnsServer& server, absl::string_view name,
                                                 absl::Duration timeout) {
  Exchange exchanges[2];
  exchanges[0].type = kDnsTypeA;
  exchanges[1].type = kDnsTypeAaaa;
  // Both questions go out at once, each from its own socket (so its own random source port).
  for (Exchange& exchange : exchanges) {
    absl::StatusOr<uint16_t> id = RandomId();
    if (!id.ok()) return id.status();
    exchange.id = *id;
    absl::StatusOr<UniqueFd> fd = ConnectedSocket(server, SOCK_DGRAM);
    if (!fd.ok()) {
      Fail(exchange, std::string(fd.status().message()));
      continue;
    }
    exchange.fd = std::move(*fd);
    const std::vector<uint8_t> query = BuildDnsQuery(exchange.id, name, exchange.type);
    if (send(exchange.fd.get(), query.data(), query.size(), MSG_NOSIGNAL) < 0) {
      Fail(exchange, std::string(ErrnoStatus("send", errno).message()));
    }
  }

  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    pollfd entries[2];
    Exchange* waiting[2];
    nfds_t count = 0;
    for (Exchange& exchange : exchanges) {
      if (exchange.finished) continue;
      entries[count] = {exchange.fd.get(), POLLIN, 0};
      waiting[count++] = &exchange;
    }
    if (count == 0) break;
    const int millis = PollMillis(deadline);
    const int ready = poll(entries, count, millis);
    if (ready < 0 && errno != EINTR) return ErrnoStatus("poll for DNS responses", errno);
    for (nfds_t i = 0; i < count && ready > 0; ++i) {
      if (entries[i].revents != 0) Receive(*waiting[i], server, name, timeout);
    }
    if (ready == 0 && millis == 0) {
      for (nfds_t i = 0; i < count; ++i) {
        Fail(*waiting[i], absl::StrCat("no answer within ", absl::FormatDuration(timeout)));
      }
    }
  }

  std::vector<IpAddress> addresses;
  bool nxdomain = false;
  bool all_answered = true;
  std::vector<std::string> errors;
  for (const Exchange& exchange : exchanges) {
    if (!exchange.response.has_value()) {
      all_answered = false;
      errors.push_back(absl::StrCat(TypeName(exchange.type), ": ", exchange.error));
      continue;
    }
    const DnsResponse& response = *exchange.response;
    if (response.rcode == kDnsNxDomain) {
      nxdomain = true;
    } else if (response.rcode != kDnsNoError) {
      all_answered = false;
      errors.push_back(absl::StrCat(TypeName(exchange.type), ": ", RcodeName(response.rcode)));
    } else {
      for (const IpAddress& address : response.addresses) {
        if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
          addresses.push_back(address);
        }
      }
    }
  }
  // An address from either question is an answer, even if the other question failed.
  if (!addresses.empty()) return addresses;
  if (nxdomain) {
    return absl::NotFoundError(
        absl::StrCat("\"", name, "\" does not exist (NXDOMAIN from ", server.ToString(), ")"));
  }
  if (all_answered) {
    return absl::NotFoundError(
        absl::StrCat("\"", name, "\" has no A or AAAA records (asked ", server.ToString(), ")"));
  }
  return absl::UnavailableError(absl::StrJoin(errors, "; "));
}

}  // namespace

absl::StatusOr<std::vector<DnsServer>> HostDnsServers() {
  UniqueFd fd(open(kResolvConf, O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(absl::StrCat("open \"", kResolvConf, "\""), errno);
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat("read \"", kResolvConf, "\""), errno);
    }
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > (1 << 20)) {
      return absl::FailedPreconditionError(
          absl::StrCat("\"", kResolvConf, "\" is larger than 1 MiB; set network.dnsServers"));
    }
  }
  std::vector<DnsServer> servers = ParseResolvConf(text);
  if (servers.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", kResolvConf,
                     "\" has no usable nameserver line; set network.dnsServers in the policy"));
  }
  return servers;
}

absl::StatusOr<std::unique_ptr<DnsResolver>> DnsResolver::Create(std::vector<DnsServer> servers,
                                                                 DnsResolverOptions options) {
  if (servers.empty()) {
    return absl::InvalidArgumentError(
        "no DNS servers to resolve with; set network.dnsServers or add a nameserver line to "
        "/etc/resolv.conf");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DNS timeout must be positive, got ", absl::FormatDuration(options.timeout)));
  }
  if (options.attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DNS attempts must be at least 1, got ", options.attempts));
  }
  return std::unique_ptr<DnsResolver>(new DnsResolver(std::move(servers), options));
}

// Thread safety: servers_ and options_ are never written after construction; each call works
// only on its own sockets.
absl::StatusOr<std::vector<IpAddress>> DnsResolver::Resolve(absl::string_view raw_name) {
  ASSIGN_OR_RETURN(const std::string name, QueryName(raw_name));
  std::vector<std::string> failures(servers_.size());
  for (int round = 0; round < options_.attempts; ++round) {
    for (size_t i = 0; i < servers_.size(); ++i) {
      absl::StatusOr<std::vector<IpAddress>> result =
          AskServer(servers_[i], name, options_.timeout);
      // An answer (addresses, or that there are none) ends the search; only a server that did
      // not answer makes us try the next one.
      if (result.ok() || absl::IsNotFound(result.status())) return result;
      failures[i] = absl::StrCat(servers_[i].ToString(), " (", result.status().message(), ")");
    }
  }
  return absl::UnavailableError(
      absl::StrCat("no DNS server answered for \"", name, "\" after ", options_.attempts,
                   " round(s): ", absl::StrJoin(failures, ", "), "; check network.dnsServers"));
}

}  // namespace moat::egress
