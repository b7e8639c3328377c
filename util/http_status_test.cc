#include "util/http_status.h"

#include "gtest/gtest.h"

namespace moat {
namespace {

TEST(HttpStatusTest, OneMappingForBothDaemons) {
  EXPECT_EQ(HttpStatusFor(absl::OkStatus()), 200);
  EXPECT_EQ(HttpStatusFor(absl::InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusFor(absl::UnauthenticatedError("x")), 401);
  EXPECT_EQ(HttpStatusFor(absl::PermissionDeniedError("x")), 403);
  EXPECT_EQ(HttpStatusFor(absl::NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusFor(absl::AlreadyExistsError("x")), 409);
  EXPECT_EQ(HttpStatusFor(absl::FailedPreconditionError("x")), 409);
  EXPECT_EQ(HttpStatusFor(absl::ResourceExhaustedError("x")), 429);
  EXPECT_EQ(HttpStatusFor(absl::UnimplementedError("x")), 501);
  EXPECT_EQ(HttpStatusFor(absl::UnavailableError("x")), 503);
  EXPECT_EQ(HttpStatusFor(absl::DeadlineExceededError("x")), 503);
  EXPECT_EQ(HttpStatusFor(absl::InternalError("x")), 500);
  EXPECT_EQ(ErrorCodeFor(429), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(ErrorCodeFor(418), "INVALID_REQUEST");
  EXPECT_EQ(ErrorCodeFor(502), "INTERNAL_ERROR");
}

TEST(HttpStatusTest, BodyIsFlatAndSurvivesBadUtf8) {
  EXPECT_EQ(ErrorBody("NOT_FOUND", "no \xff sandbox"),
            "{\"code\":\"NOT_FOUND\",\"message\":\"no \xef\xbf\xbd sandbox\"}");
}

}  // namespace
}  // namespace moat
