#include "controller/metered_store.h"

#include "controller/store/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller {
namespace {

using ::testing::HasSubstr;

TEST(MeteredStoreTest, EveryCallIsTimedByOpAndPassedThrough) {
  MemoryStore inner;
  ControllerMetrics metrics;
  MeteredStore store(&inner, &metrics);
  ASSERT_EQ(*store.Commit(WriteBatch().Put("a", "1")), 1);
  ASSERT_EQ(*store.Commit(WriteBatch().Put("b", "2")), 2);
  EXPECT_EQ((*store.Get("a"))->value, "1");
  EXPECT_EQ(store.List("").value().size(), 2u);
  EXPECT_EQ(*store.Revision(), *inner.Revision());
  std::string text = metrics.Serialize();
  EXPECT_THAT(text,
              HasSubstr("moat_controller_store_request_duration_seconds_count{op=\"commit\"} 2"));
  EXPECT_THAT(text,
              HasSubstr("moat_controller_store_request_duration_seconds_count{op=\"get\"} 1"));
  EXPECT_THAT(text,
              HasSubstr("moat_controller_store_request_duration_seconds_count{op=\"list\"} 1"));
}

}  // namespace
}  // namespace moat::controller
