// Network values from texts, for tests that set a Policy's or EgressOptions' lists directly, and
// back to texts for comparing them. A text that does not parse fails the test that wrote it.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "sandbox/values/dns_server.h"
#include "sandbox/values/domain_pattern.h"
#include "sandbox/values/ip_address.h"
#include "sandbox/values/texts.h"

namespace moat::sandbox::testing {

inline std::vector<DomainPattern> Domains(
    std::initializer_list<absl::string_view> texts,
    DomainPattern::ListKind kind = DomainPattern::ListKind::kAllow) {
  std::vector<DomainPattern> out;
  for (absl::string_view text : texts) {
    absl::StatusOr<DomainPattern> pattern = DomainPattern::Parse(text, kind);
    if (pattern.ok()) {
      out.push_back(*std::move(pattern));
    } else {
      ADD_FAILURE() << text << ": " << pattern.status();
    }
  }
  return out;
}

inline std::vector<egress::Cidr> Cidrs(std::initializer_list<absl::string_view> texts) {
  std::vector<egress::Cidr> out;
  for (absl::string_view text : texts) {
    absl::StatusOr<egress::Cidr> cidr = egress::Cidr::Parse(text);
    if (cidr.ok()) {
      out.push_back(*cidr);
    } else {
      ADD_FAILURE() << text << ": " << cidr.status();
    }
  }
  return out;
}

inline std::vector<egress::DnsServer> DnsServers(std::initializer_list<absl::string_view> texts) {
  std::vector<egress::DnsServer> out;
  for (absl::string_view text : texts) {
    absl::StatusOr<egress::DnsServer> server = egress::ParseDnsServer(text);
    if (server.ok()) {
      out.push_back(*server);
    } else {
      ADD_FAILURE() << text << ": " << server.status();
    }
  }
  return out;
}

// The normalised texts of a list of values, in order.
template <typename T>
std::vector<std::string> Texts(const std::vector<T>& values) {
  return ValueTexts(values);
}

}  // namespace moat::sandbox::testing
