#include "node-agent/pool/sandbox_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/testing/status_matchers.h"
#include "util/testing/temp_dir.h"

namespace moat::agent {
namespace {

using ::moat::matchers::IsOk;
using ::moat::matchers::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class SandboxStoreTest : public ::testing::Test {
 protected:
  static SandboxRecord Sample(const std::string& id) {
    SandboxRecord r;
    r.id = id;
    r.profile = "python";
    r.created = absl::FromUnixSeconds(1700000000);
    r.expires_at = absl::FromUnixSeconds(1700003600);
    r.metadata = {{"owner", "ci"}};
    r.env = {{"A", "1"}, {"B", "two words"}};
    r.limits = {.cpus = 1.5, .memory_bytes = 256 << 20, .pids = 64, .workspace_bytes = 1 << 30};
    r.start_path = StartPath::kWarm;
    r.token = "secret-token";
    return r;
  }

  ScopedTempDir tmp_{"moat-store-test", "/tmp"};
  const std::string root_ = tmp_.path();
};

TEST_F(SandboxStoreTest, SavesAndLoadsARecordPrivately) {
  absl::StatusOr<SandboxStore> store = SandboxStore::Open(root_ + "/entries");
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT(store->Save(Sample("sb-a1")), IsOk());
  struct stat st;
  ASSERT_EQ(::stat((root_ + "/entries/sb-a1.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // it holds the sandbox's token
  ASSERT_EQ(::stat((root_ + "/entries").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  absl::StatusOr<SandboxRecord> loaded = store->Load("sb-a1");
  ASSERT_THAT(loaded, IsOk());
  const SandboxRecord want = Sample("sb-a1");
  EXPECT_EQ(loaded->profile, want.profile);
  EXPECT_EQ(loaded->created, want.created);
  EXPECT_EQ(loaded->expires_at, want.expires_at);
  EXPECT_EQ(loaded->metadata, want.metadata);
  EXPECT_EQ(loaded->env, want.env);
  EXPECT_EQ(loaded->limits, want.limits);
  EXPECT_EQ(loaded->start_path, StartPath::kWarm);
  EXPECT_EQ(loaded->token, want.token);
  EXPECT_EQ(loaded->state, SandboxState::kReady);
}

TEST_F(SandboxStoreTest, ReplacesAtomicallyAndRemoves) {
  absl::StatusOr<SandboxStore> store = SandboxStore::Open(root_);
  ASSERT_THAT(store, IsOk());
  SandboxRecord r = Sample("sb-b2");
  ASSERT_THAT(store->Save(r), IsOk());
  r.expires_at += absl::Hours(1);
  ASSERT_THAT(store->Save(r), IsOk());
  EXPECT_EQ(store->Load("sb-b2")->expires_at, r.expires_at);
  EXPECT_FALSE(std::filesystem::exists(root_ + "/sb-b2.json.tmp"));  // renamed over, not left
  ASSERT_THAT(store->Save(Sample("sb-a1")), IsOk());
  EXPECT_THAT(store->Ids(), ElementsAre("sb-a1", "sb-b2"));
  store->Remove("sb-b2");
  EXPECT_THAT(store->Load("sb-b2"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("sb-b2")));
  EXPECT_THAT(store->Ids(), ElementsAre("sb-a1"));
}

TEST_F(SandboxStoreTest, RefusesBadIdsAndDamagedRecords) {
  absl::StatusOr<SandboxStore> store = SandboxStore::Open(root_);
  ASSERT_THAT(store, IsOk());
  EXPECT_THAT(store->Save(Sample("../etc/x")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid sandbox id")));
  std::ofstream(root_ + "/sb-c3.json") << "{\"version\": 1, \"id\": \"sb-c3\"}";
  EXPECT_THAT(store->Load("sb-c3"), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sb-c3")));
  std::ofstream(root_ + "/sb-d4.json") << "not json";
  EXPECT_THAT(store->Load("sb-d4"), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sb-d4")));
  // Another sandbox's record under this name is not taken for this one.
  ASSERT_THAT(store->Save(Sample("sb-e5")), IsOk());
  std::filesystem::rename(root_ + "/sb-e5.json", root_ + "/sb-f6.json");
  EXPECT_THAT(store->Load("sb-f6"), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sb-f6")));
}

}  // namespace
}  // namespace moat::agent
