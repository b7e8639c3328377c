// The same behaviour from every engine: MemoryStore (the fake) and SqliteStore (for real, in a
// temporary directory). SqliteStore's durability is tested by killing a writer with SIGKILL.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "controller/store/memory_store.h"
#include "controller/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/testing/temp_dir.h"

namespace moat::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "memory") {
      store_ = std::make_unique<MemoryStore>();
    } else {
      auto s = SqliteStore::Open(dir_.path() + "/controller.db");
      ASSERT_TRUE(s.ok()) << s.status();
      store_ = *std::move(s);
    }
  }
  ScopedTempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, PutGetListDelete) {
  ASSERT_TRUE(store_->Commit(WriteBatch().Put("sandboxes/a", "1").Put("sandboxes/b", "2")).ok());
  ASSERT_TRUE(store_->Commit(WriteBatch().Put("nodes/n1", "x")).ok());
  auto a = store_->Get("sandboxes/a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->value, "1");
  EXPECT_EQ((*a)->revision, 1);
  auto list = store_->List("sandboxes/");
  ASSERT_TRUE(list.ok());
  EXPECT_THAT(*list, ElementsAre(Field(&KeyValue::key, "sandboxes/a"),
                                 Field(&KeyValue::key, "sandboxes/b")));
  ASSERT_TRUE(store_->Commit(WriteBatch().Delete("sandboxes/a")).ok());
  auto gone = store_->Get("sandboxes/a");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
  EXPECT_EQ(*store_->Revision(), 3);
}

TEST_P(StoreTest, PreconditionsMakeABatchAllOrNothing) {
  auto rev = store_->Commit(WriteBatch().Require("k", 0).Put("k", "first"));
  ASSERT_TRUE(rev.ok()) << rev.status();
  // A second create of the same key fails, and so does the rest of its batch.
  auto again = store_->Commit(WriteBatch().Require("k", 0).Put("k", "second").Put("other", "x"));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store_->Get("k"))->value, "first");
  EXPECT_FALSE(store_->Get("other")->has_value());
  // An update at the revision read succeeds; one at a stale revision does not.
  EXPECT_TRUE(store_->Commit(WriteBatch().Require("k", *rev).Put("k", "third")).ok());
  EXPECT_FALSE(store_->Commit(WriteBatch().Require("k", *rev).Put("k", "fourth")).ok());
  EXPECT_EQ((*store_->Get("k"))->value, "third");
}

TEST_P(StoreTest, ListDoesNotMatchKeysBeyondThePrefix) {
  ASSERT_TRUE(
      store_->Commit(WriteBatch().Put("a/1", "").Put("a~", "").Put("a0", "").Put("b", "")).ok());
  auto list = store_->List("a/");
  ASSERT_TRUE(list.ok());
  EXPECT_THAT(*list, ElementsAre(Field(&KeyValue::key, "a/1")));
}

TEST_P(StoreTest, RefusesKeysWithSpacesOrControlBytes) {
  EXPECT_EQ(store_->Commit(WriteBatch().Put("a b", "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Commit(WriteBatch().Put(std::string("a\0b", 3), "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*store_->Revision(), 0);
}

TEST_P(StoreTest, ValuesAreBinarySafe) {
  std::string value("a\0b\xff", 4);
  ASSERT_TRUE(store_->Commit(WriteBatch().Put("bin", value)).ok());
  EXPECT_EQ((*store_->Get("bin"))->value, value);
}

INSTANTIATE_TEST_SUITE_P(Engines, StoreTest, ::testing::Values("memory", "sqlite"));

TEST(SqliteStoreTest, ReopenKeepsDataAndRevision) {
  ScopedTempDir dir;
  std::string path = dir.path() + "/c.db";
  {
    auto s = SqliteStore::Open(path);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Commit(WriteBatch().Put("x", "1")).ok());
    ASSERT_TRUE((*s)->Commit(WriteBatch().Put("y", "2")).ok());
  }
  auto s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*(*s)->Revision(), 2);
  EXPECT_EQ((*(*s)->Get("y"))->value, "2");
  EXPECT_EQ(*(*s)->Commit(WriteBatch().Put("z", "3")), 3);
}

TEST(SqliteStoreTest, OpenInAMissingDirectorySaysWhatToCheck) {
  auto s = SqliteStore::Open("/nonexistent-moat-dir/c.db");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("state_dir"));
}

// A child commits keys one by one and tells the parent each revision it was given; the parent
// kills it with SIGKILL in the middle. Every acknowledged key must be in the reopened store.
TEST(SqliteStoreTest, WhatWasAcknowledgedSurvivesKill9) {
  ScopedTempDir dir;
  std::string path = dir.path() + "/c.db";
  int acks[2];
  ASSERT_EQ(pipe(acks), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(acks[0]);
    auto s = SqliteStore::Open(path);
    if (!s.ok()) _exit(1);
    for (int i = 1;; ++i) {
      auto rev = (*s)->Commit(WriteBatch().Put(absl::StrCat("k/", i), std::string(100, 'v')));
      if (!rev.ok()) _exit(2);
      if (write(acks[1], &i, sizeof(i)) != sizeof(i)) _exit(3);
    }
  }
  close(acks[1]);
  int last = 0, got = 0;
  while (got < 200 && read(acks[0], &got, sizeof(got)) == sizeof(got)) last = got;
  kill(child, SIGKILL);
  // Acknowledgements already in the pipe were sent after their commits returned.
  while (read(acks[0], &got, sizeof(got)) == sizeof(got)) last = got;
  int status = 0;
  waitpid(child, &status, 0);
  close(acks[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped by itself: status " << status;
  ASSERT_GE(last, 200);
  auto s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int i = 1; i <= last; ++i) {
    auto kv = (*s)->Get(absl::StrCat("k/", i));
    ASSERT_TRUE(kv.ok() && kv->has_value()) << "acknowledged key k/" << i << " is gone";
  }
  EXPECT_GE(*(*s)->Revision(), last);
}

}  // namespace
}  // namespace moat::controller
