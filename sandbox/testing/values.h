// Network values from texts, for tests that set a Policy's or EgressOptions' lists directly, and
// back to texts for comparing them. A text that does not parse fails the test that wrote it.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "sandbox/values/dns_server.h"
#include "sandbox/values/domain_pattern.h"
#include "sandbox/values/ip_address.h"
#include "sandbox/values/texts.h"

namespace moat::sandbox::testing {

// Each text parsed by `parse` (a callable returning absl::StatusOr<T>), in order.
template <typename T, typename Parse>
std::vector<T> ParseEach(std::initializer_list<absl::string_view> texts, Parse parse) {
  std::vector<T> out;
  for (absl::string_view text : texts) {
    absl::StatusOr<T> value = parse(text);
    if (value.ok()) {
      out.push_back(*std::move(value));
    } else {
      ADD_FAILURE() << text << ": " << value.status();
    }
  }
  return out;
}

inline std::vector<DomainPattern> Domains(
    std::initializer_list<absl::string_view> texts,
    DomainPattern::ListKind kind = DomainPattern::ListKind::kAllow) {
  return ParseEach<DomainPattern>(
      texts, [kind](absl::string_view text) { return DomainPattern::Parse(text, kind); });
}

inline std::vector<egress::Cidr> Cidrs(std::initializer_list<absl::string_view> texts) {
  return ParseEach<egress::Cidr>(texts, &egress::Cidr::Parse);
}

inline std::vector<egress::DnsServer> DnsServers(std::initializer_list<absl::string_view> texts) {
  return ParseEach<egress::DnsServer>(texts, &egress::ParseDnsServer);
}

// The normalised texts of a list of values, in order.
template <typename T>
std::vector<std::string> Texts(const std::vector<T>& values) {
  return ValueTexts(values);
}

}  // namespace moat::sandbox::testing
