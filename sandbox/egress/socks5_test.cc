#include "sandbox/egress/socks5.h"

#include <string>

#include "gtest/gtest.h"

namespace moat::egress {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

TEST(ParseSocksGreetingTest, FindsNoAuthAndWaitsForMore) {
  bool no_auth = true;
  EXPECT_EQ(*ParseSocksGreeting(Bytes({5}), &no_auth), 0u);
  EXPECT_EQ(*ParseSocksGreeting(Bytes({5, 2, 2}), &no_auth), 0u);
  EXPECT_EQ(*ParseSocksGreeting(Bytes({5, 2, 2, 0, 9}), &no_auth), 4u);
  EXPECT_TRUE(no_auth);
  EXPECT_EQ(*ParseSocksGreeting(Bytes({5, 1, 2}), &no_auth), 3u);
  EXPECT_FALSE(no_auth);
  EXPECT_FALSE(ParseSocksGreeting(Bytes({4, 1, 0}), &no_auth).ok());
}

TEST(ParseSocksRequestTest, AllThreeAddressTypes) {
  SocksRequest r;
  EXPECT_EQ(*ParseSocksRequest(Bytes({5, 1, 0, 1, 127, 0, 0, 1, 0x1f, 0x90}), &r), 10u);
  EXPECT_EQ(r.command, 1);
  EXPECT_EQ(r.host, "127.0.0.1");
  EXPECT_EQ(r.port, 8080);

  const std::string domain = Bytes({5, 1, 0, 3, 5}) + "a.com" + Bytes({1, 187});
  EXPECT_EQ(*ParseSocksRequest(domain, &r), domain.size());
  EXPECT_EQ(r.host, "a.com");
  EXPECT_EQ(r.port, 443);
  EXPECT_EQ(*ParseSocksRequest(domain.substr(0, domain.size() - 1), &r), 0u);

  std::string v6 = Bytes({5, 3, 0, 4});
  v6 += std::string(15, '\0') + Bytes({1, 0, 80});
  EXPECT_EQ(*ParseSocksRequest(v6, &r), 22u);
  EXPECT_EQ(r.command, 3);
  EXPECT_EQ(r.host, "::1");
}

TEST(ParseSocksRequestTest, KeepsDomainBytesVerbatimForTheCaller) {
  SocksRequest r;
  const std::string nul =
      Bytes({5, 1, 0, 3, 9}) + std::string("a.com\0.x", 8) + "y" + Bytes({0, 80});
  ASSERT_TRUE(ParseSocksRequest(nul, &r).ok());
  EXPECT_EQ(r.host, std::string("a.com\0.xy", 9));
}

TEST(ParseSocksRequestTest, Refusals) {
  SocksRequest r;
  EXPECT_TRUE(absl::IsUnimplemented(ParseSocksRequest(Bytes({5, 1, 0, 9, 0, 0}), &r).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSocksRequest(Bytes({4, 1, 0, 1}), &r).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSocksRequest(Bytes({5, 1, 1, 1}), &r).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(ParseSocksRequest(Bytes({5, 1, 0, 3, 0, 0, 80}), &r).status()));
}

TEST(SocksReplyMessageTest, Layout) {
  EXPECT_EQ(SocksReplyMessage(SocksReply::kNotAllowed, std::nullopt, 0),
            Bytes({5, 2, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(SocksReplyMessage(SocksReply::kSucceeded, IpAddress::V4(0x7f000001), 0x1234),
            Bytes({5, 0, 0, 1, 127, 0, 0, 1, 0x12, 0x34}));
  const std::string v6 = SocksReplyMessage(SocksReply::kSucceeded, *IpAddress::Parse("::1"), 1);
  ASSERT_EQ(v6.size(), 22u);
  EXPECT_EQ(v6[3], 4);
  EXPECT_EQ(v6[19], 1);
}

}  // namespace
}  // namespace moat::egress
