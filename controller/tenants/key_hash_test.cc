#include "controller/tenants/key_hash.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller {
namespace {

TEST(KeyHashTest, AMadeKeyVerifiesAndNamesItsId) {
  auto key = MakeKey(1000);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_THAT(key->plaintext, ::testing::StartsWith("msk_" + key->id + "_"));
  EXPECT_EQ(key->plaintext.size(), 4u + 16 + 1 + 64);
  EXPECT_TRUE(VerifyKey(key->plaintext, key->hash));
  auto id = KeyId(key->plaintext);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, key->id);
}

TEST(KeyHashTest, TheStoredHashIsNeitherTheKeyNorItsSecret) {
  auto key = MakeKey(1000);
  ASSERT_TRUE(key.ok());
  std::string secret = key->plaintext.substr(4 + 16 + 1);
  EXPECT_EQ(key->hash.hash.find(secret), std::string::npos);
  EXPECT_EQ(key->hash.salt.find(secret), std::string::npos);
  EXPECT_EQ(key->hash.hash.size(), 64u);
  EXPECT_EQ(key->hash.rounds, 1000);
}

TEST(KeyHashTest, AnyChangedCharacterFails) {
  auto key = MakeKey(1000);
  ASSERT_TRUE(key.ok());
  for (size_t i = 0; i < key->plaintext.size(); i += 7) {
    std::string bad = key->plaintext;
    bad[i] = bad[i] == 'a' ? 'b' : 'a';
    EXPECT_FALSE(VerifyKey(bad, key->hash)) << i;
  }
  EXPECT_FALSE(VerifyKey("", key->hash));
  EXPECT_FALSE(VerifyKey(key->plaintext + "0", key->hash));
}

TEST(KeyHashTest, TheSameKeyHashesDifferentlyEachTime) {
  // Salted: two records of one key share nothing an attacker could precompute.
  auto a = HashKey("msk_the-same-key", 1000);
  auto b = HashKey("msk_the-same-key", 1000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->salt, b->salt);
  EXPECT_NE(a->hash, b->hash);
  EXPECT_TRUE(VerifyKey("msk_the-same-key", *a));
  EXPECT_TRUE(VerifyKey("msk_the-same-key", *b));
}

TEST(KeyHashTest, TheRoundsArePartOfTheHash) {
  auto key = MakeKey(1000);
  ASSERT_TRUE(key.ok());
  KeyHash fewer = key->hash;
  fewer.rounds = 999;
  EXPECT_FALSE(VerifyKey(key->plaintext, fewer));
  fewer.rounds = 0;
  EXPECT_FALSE(VerifyKey(key->plaintext, fewer));
}

TEST(KeyHashTest, DamagedRecordsVerifyNothing) {
  auto key = MakeKey(1000);
  ASSERT_TRUE(key.ok());
  KeyHash h = key->hash;
  h.hash = h.hash.substr(0, 62);
  EXPECT_FALSE(VerifyKey(key->plaintext, h));
  h = key->hash;
  h.hash[0] = 'Z';
  EXPECT_FALSE(VerifyKey(key->plaintext, h));
}

TEST(KeyHashTest, KeyIdRefusesWhatIsNotAKey) {
  for (const char* bad :
       {"", "msk_", "acme-key-0123456789abcdef", "msk_0123456789abcdef_short",
        "msk_0123456789ABCDEF_0123456789abcdef0123456789abcdef0123456789abcdef01234567"
        "89abcdef"}) {
    EXPECT_FALSE(KeyId(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace moat::controller
