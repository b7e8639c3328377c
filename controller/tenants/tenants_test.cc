// The registry on both embedded engines: MemoryStore and SqliteStore in a temporary directory.
#include "controller/tenants/tenants.h"

#include <stdlib.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "controller/store/memory_store.h"
#include "controller/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/testing/temp_dir.h"

namespace moat::controller {
namespace {

using ::testing::HasSubstr;

class TenantRegistryTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      auto s = SqliteStore::Open(dir_ + "/c.db");
      ASSERT_TRUE(s.ok()) << s.status();
      store_ = *std::move(s);
    } else {
      store_ = std::make_unique<MemoryStore>();
    }
    registry_ = std::make_unique<TenantRegistry>(store_.get(), &clock_, /*hash_rounds=*/1000);
  }
  void TearDown() override {
    registry_.reset();
    store_.reset();
  }

  ScopedTempDir tmp_{"moat-tenants", "/tmp"};
  const std::string dir_ = tmp_.path();
  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<TenantRegistry> registry_;
};

TEST_P(TenantRegistryTest, AKeyAuthenticatesAsItsTenantOnly) {
  ASSERT_TRUE(registry_->CreateTenant("acme", {}).ok());
  ASSERT_TRUE(registry_->CreateTenant("globex", {}).ok());
  auto a = registry_->CreateKey("acme");
  auto g = registry_->CreateKey("globex");
  ASSERT_TRUE(a.ok() && g.ok());
  EXPECT_EQ(registry_->Authenticate(a->plaintext).value_or(""), "acme");
  EXPECT_EQ(registry_->Authenticate(g->plaintext).value_or(""), "globex");
  // Twice: the second answer comes from the cache of verified keys, and must agree.
  EXPECT_EQ(registry_->Authenticate(a->plaintext).value_or(""), "acme");
  // acme's id with globex's secret: the cache must not take the id for the key.
  std::string mixed = "msk_" + a->record.id + g->plaintext.substr(4 + 16);
  EXPECT_TRUE(absl::IsUnauthenticated(registry_->Authenticate(mixed).status()));
  EXPECT_TRUE(absl::IsUnauthenticated(registry_->Authenticate("acme").status()));
}

TEST_P(TenantRegistryTest, TheStoreHoldsNoPlaintextKey) {
  ASSERT_TRUE(registry_->CreateTenant("acme", {}).ok());
  auto a = registry_->CreateKey("acme");
  ASSERT_TRUE(a.ok());
  auto all = store_->List("");
  ASSERT_TRUE(all.ok());
  std::string secret = a->plaintext.substr(4 + 16 + 1);
  for (const KeyValue& kv : *all) {
    EXPECT_FALSE(absl::StrContains(kv.value, secret)) << kv.key;
    EXPECT_FALSE(absl::StrContains(kv.key, secret)) << kv.key;
  }
}

TEST_P(TenantRegistryTest, RevokeStopsTheKeyAtOnceEvenWhenCached) {
  ASSERT_TRUE(registry_->CreateTenant("acme", {}).ok());
  auto a = registry_->CreateKey("acme");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(registry_->Authenticate(a->plaintext).ok());
  ASSERT_TRUE(registry_->RevokeKey(a->record.id).ok());
  EXPECT_TRUE(absl::IsUnauthenticated(registry_->Authenticate(a->plaintext).status()));
  EXPECT_TRUE(absl::IsNotFound(registry_->RevokeKey(a->record.id)));
  EXPECT_TRUE(absl::IsNotFound(registry_->RevokeKey("../tenants/acme")));
}

TEST_P(TenantRegistryTest, RotateGivesANewKeyAndTheOldOneStops) {
  ASSERT_TRUE(registry_->CreateTenant("acme", {}).ok());
  auto a = registry_->CreateKey("acme");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(registry_->Authenticate(a->plaintext).ok());
  auto b = registry_->RotateKey(a->record.id);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->record.id, a->record.id);
  EXPECT_EQ(b->record.tenant, "acme");
  EXPECT_EQ(registry_->Authenticate(b->plaintext).value_or(""), "acme");
  EXPECT_FALSE(registry_->Authenticate(a->plaintext).ok());
  auto keys = registry_->ListKeys("acme");
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ((*keys)[0].id, b->record.id);
  EXPECT_TRUE(absl::IsNotFound(registry_->RotateKey(a->record.id).status()));
}

TEST_P(TenantRegistryTest, ARevokeOnAnotherReplicaReachesThisOneWithinTheCacheTtl) {
  ASSERT_TRUE(registry_->CreateTenant("acme", {}).ok());
  auto a = registry_->CreateKey("acme");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(registry_->Authenticate(a->plaintext).ok());
  TenantRegistry other(store_.get(), &clock_, 1000);  // A second replica on the same store.
  ASSERT_TRUE(other.RevokeKey(a->record.id).ok());
  clock_.Advance(TenantRegistry::kKeyCacheTtl + absl::Seconds(1));
  EXPECT_FALSE(registry_->Authenticate(a->plaintext).ok());
}

TEST_P(TenantRegistryTest, TenantsAreCreatedOnceWithValidNames) {
  EXPECT_TRUE(registry_->CreateTenant("acme", {.max_sandboxes = 3}).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(registry_->CreateTenant("acme", {}).status()));
  for (const char* bad : {"", "-x", "Acme", "a/b", "a b", "a_b"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(registry_->CreateTenant(bad, {}).status())) << bad;
  }
  EXPECT_TRUE(absl::IsNotFound(registry_->CreateKey("nobody").status()));
  // A refused name is shown quoted and escaped: it cannot forge a line where the error is logged.
  absl::Status forged = registry_->CreateTenant("x\nmoat-controller info: tenant ok", {}).status();
  EXPECT_EQ(std::string(forged.message()).find('\n'), std::string::npos) << forged;
  EXPECT_NE(forged.message().find("\"x\\nmoat-controller"), absl::string_view::npos) << forged;
  auto list = registry_->ListTenants();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].quota.max_sandboxes, 3);
}

TEST_P(TenantRegistryTest, QuotasAreStoredAndChanged) {
  ASSERT_TRUE(registry_->CreateTenant("acme", {.max_sandboxes = 3, .max_cpu = 2}).ok());
  EXPECT_EQ(registry_->QuotaOf("acme")->max_cpu, 2);
  ASSERT_TRUE(registry_->SetQuota("acme", {.max_memory = 1 << 30}).ok());
  TenantQuota q = *registry_->QuotaOf("acme");
  EXPECT_EQ(q.max_sandboxes, 0);
  EXPECT_EQ(q.max_memory, 1u << 30);
  // A tenant of the key file has no record: no limits.
  EXPECT_EQ(*registry_->QuotaOf("from-file"), TenantQuota{});
  EXPECT_TRUE(absl::IsNotFound(registry_->SetQuota("nobody", {}).status()));
}

TEST_P(TenantRegistryTest, WrongSecretsForAKnownIdCannotBuyUnboundedHashing) {
  ASSERT_TRUE(registry_->CreateTenant("acme", {}).ok());
  auto a = registry_->CreateKey("acme");
  ASSERT_TRUE(a.ok());
  std::string wrong = a->plaintext;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  for (int i = 0; i < TenantRegistry::kMaxHashesPerSecond; ++i) {
    EXPECT_FALSE(registry_->Authenticate(wrong).ok());
  }
  // Past the budget even the right key is refused until the second is over (it is not cached).
  EXPECT_FALSE(registry_->Authenticate(a->plaintext).ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(registry_->Authenticate(a->plaintext).value_or(""), "acme");
  // Once verified it is cached: wrong secrets no longer lock it out.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(registry_->Authenticate(wrong).ok());
  EXPECT_EQ(registry_->Authenticate(a->plaintext).value_or(""), "acme");
}

INSTANTIATE_TEST_SUITE_P(Engines, TenantRegistryTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Sqlite" : "Memory"; });

}  // namespace
}  // namespace moat::controller
