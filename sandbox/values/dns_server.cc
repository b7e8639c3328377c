#include "sandbox/values/dns_server.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/status_macros.h"

namespace moat::egress {
namespace {

constexpr char kServerForms[] =
    "expected e.g. \"192.0.2.53\", \"127.0.0.1:5353\" or \"[::1]:5353\"";

absl::StatusOr<uint16_t> ParsePort(absl::string_view text, absl::string_view server) {
  uint32_t port = 0;
  // SimpleAtoi accepts a sign and spaces; a port is digits only.
  const bool digits = !text.empty() && text.size() <= 5 &&
                      std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
  if (!digits || !absl::SimpleAtoi(text, &port) || port == 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("DNS server \"", server, "\" has port \"", text,
                                                   "\"; a port is a number from 1 to 65535"));
  }
  return static_cast<uint16_t>(port);
}

}  // namespace

std::string DnsServer::ToString() const {
  if (address.is_v4()) return absl::StrCat(address.ToString(), ":", port);
  return absl::StrCat("[", address.ToString(), "]:", port);
}

absl::StatusOr<DnsServer> ParseDnsServer(absl::string_view text) {
  const absl::string_view original = text;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty DNS server; ", kServerForms));
  }
  absl::string_view host = text;
  std::optional<absl::string_view> port;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("DNS server \"", original, "\" lacks the closing ']'; ", kServerForms));
    }
    host = text.substr(1, close - 1);
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (!absl::ConsumePrefix(&rest, ":")) {
        return absl::InvalidArgumentError(
            absl::StrCat("DNS server \"", original, "\" has text after ']' that is not \":port\"; ",
                         kServerForms));
      }
      port = rest;
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    // One colon: IPv4 with a port. IPv6 has at least two and needs brackets for a port.
    const size_t colon = text.find(':');
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  DnsServer server;
  if (port.has_value()) {
    ASSIGN_OR_RETURN(server.port, ParsePort(*port, original));
  }
  std::optional<IpAddress> address = IpAddress::Parse(host);
  if (!address.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DNS server \"", original,
        "\" is not an IP address (a name would need DNS to be resolved); ", kServerForms));
  }
  server.address = *address;
  return server;
}

std::vector<DnsServer> ParseResolvConf(absl::string_view text) {
  std::vector<DnsServer> servers;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t comment = line.find_first_of("#;");
    if (comment != absl::string_view::npos) line = line.substr(0, comment);
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.size() < 2 || words[0] != "nameserver") continue;
    // resolv.conf has no port syntax; scoped addresses ("fe80::1%eth0") are skipped.
    std::optional<IpAddress> address = IpAddress::Parse(words[1]);
    if (!address.has_value()) continue;
    DnsServer server;
    server.address = *address;
    servers.push_back(server);
  }
  return servers;
}

}  // namespace moat::egress
