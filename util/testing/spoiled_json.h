// Test helper: request bodies spoiled every way, to show that a handler answers bad input
// with a 4xx and never crashes or answers 5xx (a handler that throws).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace moat::testing {

// Every way to spoil one value of `valid`: each member or element (at any depth) dropped, or
// replaced by a value of each JSON kind, plus an unknown member (or element) and a deep nest at
// the top, and bodies of other kinds.
inline std::vector<nlohmann::json> Spoiled(const nlohmann::json& valid) {
  using nlohmann::json;
  const std::vector<json> kinds = {nullptr,
                                   true,
                                   -1,
                                   0,
                                   1e308,
                                   18446744073709551615ULL,
                                   -9223372036854775807LL - 1,
                                   "",
                                   std::string(5000, 'x'),
                                   "a\nb\u0001\"",
                                   "1e9999",
                                   json::array(),
                                   json::array({1, "a", nullptr}),
                                   json::object(),
                                   json::object({{"", nullptr}})};
  std::vector<json> out;
  std::vector<json::json_pointer> pointers;
  std::function<void(const json&, const json::json_pointer&)> walk =
      [&](const json& node, const json::json_pointer& at) {
        if (!at.empty()) pointers.push_back(at);
        if (node.is_object()) {
          for (const auto& [k, v] : node.items()) walk(v, at / k);
        } else if (node.is_array()) {
          for (size_t i = 0; i < node.size(); ++i) walk(node[i], at / i);
        }
      };
  walk(valid, json::json_pointer());
  for (const json::json_pointer& at : pointers) {
    json dropped = valid;
    json& parent = dropped[at.parent_pointer()];
    if (parent.is_object()) parent.erase(at.back());
    if (parent.is_array()) parent.erase(std::stoul(at.back()));
    out.push_back(std::move(dropped));
    for (const json& kind : kinds) {
      json replaced = valid;
      replaced[at] = kind;
      out.push_back(std::move(replaced));
    }
  }
  json deep = 1;
  for (int i = 0; i < 200; ++i) deep = json::array({deep});
  json unknown = valid, nested = valid;
  if (valid.is_object()) {
    unknown["surprise"] = 1;
    nested["deep"] = deep;
  } else if (valid.is_array()) {
    unknown.push_back("surprise");
    nested.push_back(deep);
  }
  out.push_back(std::move(unknown));
  out.push_back(std::move(nested));
  for (json top : {json(nullptr), json(1), json("x"), json::array({valid})}) out.push_back(top);
  return out;
}

}  // namespace moat::testing
