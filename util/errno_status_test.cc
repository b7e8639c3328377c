#include "util/errno_status.h"

#include <gtest/gtest.h>

namespace moat {
namespace {

TEST(ErrnoStatusTest, NamesStepAndError) {
  absl::Status s = ErrnoStatus("mount tmpfs on \"/tmp\"", EPERM);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "mount tmpfs on \"/tmp\": Operation not permitted");
}

TEST(ErrnoStatusTest, MapsCommonErrnos) {
  EXPECT_EQ(ErrnoToCode(ENOENT), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToCode(ENOSPC), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToCode(ENOSYS), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ErrnoToCode(12345), absl::StatusCode::kUnknown);
  // Abseil's answers, except where a client needs another one.
  EXPECT_EQ(ErrnoToCode(ECONNREFUSED), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToCode(EISDIR), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoToCode(ENOTDIR), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToCode(EAGAIN), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToCode(EINTR), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace moat
