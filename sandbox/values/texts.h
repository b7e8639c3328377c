// A list of values (domain patterns, CIDRs, DNS servers) as the policy files write them: each
// value's normalised text, in order. For showing and comparing lists, never for parsing again.
#pragma once

#include <string>
#include <vector>

namespace moat {

template <typename T>
std::vector<std::string> ValueTexts(const std::vector<T>& values) {
  std::vector<std::string> out;
  out.reserve(values.size());
  for (const T& value : values) out.push_back(value.ToString());
  return out;
}

}  // namespace moat
