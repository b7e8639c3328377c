// Test helper for the agent's HTTP APIs: checks that a response is the JSON error the API
// promises, {"code", "message"} (OpenSandbox's ErrorResponse), with this status and code.
#pragma once

#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moat::agent::testing {

// `response` is (HTTP status, body). Returns the error's message ("" if there is none).
inline std::string ExpectError(const std::pair<int, std::string>& response, int status,
                               const std::string& code) {
  EXPECT_EQ(response.first, status) << response.second;
  nlohmann::json body = nlohmann::json::parse(response.second, nullptr, false);
  EXPECT_TRUE(body.is_object() && body.contains("code") && body.contains("message"))
      << response.second;
  if (!body.is_object() || !body.contains("code")) return "";
  EXPECT_EQ(body["code"], code) << response.second;
  return body.value("message", "");
}

}  // namespace moat::agent::testing
