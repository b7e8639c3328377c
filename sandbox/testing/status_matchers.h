// gMock matchers for absl::Status and absl::StatusOr, which Debian's Abseil (20220623) does not
// ship:
//   EXPECT_THAT(ParseSize("1Q"), StatusIs(absl::StatusCode::kInvalidArgument,
//                                         HasSubstr("invalid size")));
//   EXPECT_THAT(Load(path), IsOk());
#pragma once

#include <gmock/gmock.h>

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moat::matchers {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = GetStatus(arg);
  if (!status.ok()) *result_listener << "which is " << status;
  return status.ok();
}

MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has code ") + absl::StatusCodeToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher)) {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "which is " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(status.message()),
                                       result_listener);
}

}  // namespace moat::matchers
