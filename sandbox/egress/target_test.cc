#include "sandbox/egress/target.h"

#include <arpa/inet.h>

#include <string>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::egress {
namespace {

using ::testing::HasSubstr;

TEST(CanonicalizeHostTest, NumericIpv4SpellingsBecomeOneDottedQuad) {
  struct Case {
    absl::string_view raw;
    absl::string_view canonical;
  } cases[] = {
      {"2852039166", "169.254.169.254"},
      {"2130706433", "127.0.0.1"},
      {"127.1", "127.0.0.1"},
      {"127.0.1", "127.0.0.1"},
      {"127.0.0.1", "127.0.0.1"},
      {"127.0.0.1.", "127.0.0.1"},
      {"0x7f.0.0.1", "127.0.0.1"},
      {"0X7F.0.0.1", "127.0.0.1"},
      {"0x7f000001", "127.0.0.1"},
      {"0x7F000001", "127.0.0.1"},
      {"0177.0.0.1", "127.0.0.1"},
      {"0177.1", "127.0.0.1"},
      {"017700000001", "127.0.0.1"},
      {"00000000177.0.0.01", "127.0.0.1"},
      {"0x0000007f.1", "127.0.0.1"},
      {"169.254.43518", "169.254.169.254"},
      {"169.16689662", "169.254.169.254"},
      {"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
      {"0251.0376.0251.0376", "169.254.169.254"},
      {"0", "0.0.0.0"},
      {"00", "0.0.0.0"},
      {"0.0", "0.0.0.0"},
      {"4294967295", "255.255.255.255"},
      {"0xffffffff", "255.255.255.255"},
      {"255.16777215", "255.255.255.255"},
      {"255.255.65535", "255.255.255.255"},
      {"010.0.0.1", "8.0.0.1"},  // octal, as inet_aton and browsers read it
      {"1.2.3.4", "1.2.3.4"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<CanonicalHost> host = CanonicalizeHost(c.raw);
    ASSERT_TRUE(host.ok()) << c.raw << ": " << host.status();
    EXPECT_EQ(host->text, c.canonical) << c.raw;
    ASSERT_TRUE(host->literal.has_value()) << c.raw;
    EXPECT_TRUE(host->literal->is_v4());
    EXPECT_EQ(host->literal->ToString(), c.canonical) << c.raw;
  }
}

// Every all-numeric spelling we accept, glibc's inet_aton reads as the same address, and every
// one it refuses we refuse too: the proxy and any resolver in the path agree.
TEST(CanonicalizeHostTest, AgreesWithInetAton) {
  for (absl::string_view raw : {"2852039166",
                                "127.1",
                                "0x7f.0.0.1",
                                "0177.0.0.1",
                                "0x7f000001",
                                "017700000001",
                                "0",
                                "0x0",
                                "1.2.3.4",
                                "1.2.3",
                                "1.2",
                                "0xff.0xff.0xffff",
                                "4294967295",
                                "4294967296",
                                "0x100000000",
                                "1.2.3.4.5",
                                "256.1.1.1",
                                "1.256.1.1",
                                "1.2.256.1",
                                "1.2.3.256",
                                "1.16777216",
                                "1.2.65536",
                                "255.16777215",
                                "08",
                                "09.1.1.1",
                                "0118",
                                "0x",
                                "0x.1",
                                "1.0x",
                                "1..2",
                                ".1.2.3",
                                "1.2.3.-4",
                                "00000000000000000000001",
                                "0x00000000001",
                                "037777777777",
                                "040000000000",
                                "99999999999999999999"}) {
    std::string copy(raw);
    struct in_addr expected;
    bool aton_ok = inet_aton(copy.c_str(), &expected) == 1;
    absl::StatusOr<CanonicalHost> host = CanonicalizeHost(raw);
    if (!aton_ok) {
      EXPECT_FALSE(host.ok()) << raw << " is refused by inet_aton but read as " << host->text;
      continue;
    }
    ASSERT_TRUE(host.ok()) << raw << ": " << host.status();
    EXPECT_EQ(host->text, inet_ntoa(expected)) << raw;
  }
}

TEST(CanonicalizeHostTest, Ipv6Literals) {
  struct Case {
    absl::string_view raw;
    absl::string_view canonical;
    bool v4;
  } cases[] = {
      {"::1", "::1", false},
      {"[::1]", "::1", false},
      {"[0:0:0:0:0:0:0:1]", "::1", false},
      {"[FD00:EC2::254]", "fd00:ec2::254", false},
      {"2001:DB8:0:0:0:0:0:1", "2001:db8::1", false},
      // IPv4-mapped addresses are dialled as IPv4, so they are matched as IPv4.
      {"::ffff:127.0.0.1", "127.0.0.1", true},
      {"[::ffff:7f00:1]", "127.0.0.1", true},
      {"[::FFFF:A9FE:A9FE]", "169.254.169.254", true},
      {"[0:0:0:0:0:ffff:127.0.0.1]", "127.0.0.1", true},
      // Compatible and NAT64 forms stay IPv6 here (the address checks still see the IPv4).
      {"[::127.0.0.1]", "::127.0.0.1", false},
      {"[64:ff9b::7f00:1]", "64:ff9b::7f00:1", false},
  };
  for (const auto& c : cases) {
    absl::StatusOr<CanonicalHost> host = CanonicalizeHost(c.raw);
    ASSERT_TRUE(host.ok()) << c.raw << ": " << host.status();
    EXPECT_EQ(host->text, c.canonical) << c.raw;
    ASSERT_TRUE(host->literal.has_value());
    EXPECT_EQ(host->literal->is_v4(), c.v4) << c.raw;
    EXPECT_EQ(host->literal->ToString(), c.canonical) << c.raw;
  }
}

TEST(CanonicalizeHostTest, NamesAreLowerCasedWithoutOneTrailingDot) {
  struct Case {
    absl::string_view raw;
    absl::string_view canonical;
  } cases[] = {
      {"example.com", "example.com"},
      {"Example.COM", "example.com"},
      {"EXAMPLE.COM.", "example.com"},
      {"localhost", "localhost"},
      {"a-b.example", "a-b.example"},
      {"xn--bcher-kva.example", "xn--bcher-kva.example"},
      // Numeric labels are fine as long as the last one is not a number.
      {"127.0.0.1.nip.io", "127.0.0.1.nip.io"},
      {"1.2.3.example", "1.2.3.example"},
      {"0x7f.example", "0x7f.example"},
      {"example.0xg", "example.0xg"},
      {"123abc", "123abc"},
      {"1.2.3.04a", "1.2.3.04a"},  // "04a" is no number to inet_aton or URL parsers
  };
  for (const auto& c : cases) {
    absl::StatusOr<CanonicalHost> host = CanonicalizeHost(c.raw);
    ASSERT_TRUE(host.ok()) << c.raw << ": " << host.status();
    EXPECT_EQ(host->text, c.canonical) << c.raw;
    EXPECT_FALSE(host->literal.has_value()) << c.raw;
  }
}

TEST(CanonicalizeHostTest, RefusesWithAReason) {
  std::string long_label(64, 'a');
  std::string long_name;
  for (int i = 0; i < 64; ++i) long_name += "abc.";
  long_name += "com";  // 259 bytes
  struct Case {
    std::string raw;
    absl::string_view why;
  } cases[] = {
      {"", "empty"},
      {std::string("example.com\0.evil.com", 21), "NUL"},
      {std::string("127.0.0.1\0", 10), "NUL"},
      {std::string("\0", 1), "NUL"},
      {"example.com\n", "control"},
      {"exa\tmple.com", "control"},
      {"example.com\r\nX-Injected: 1", "control"},
      {"example\x7f.com", "control"},
      {"ex\xc3\xa4mple.com", "non-ASCII"},
      {"example.com%00", "\"%\""},
      {"example%2ecom", "\"%\""},
      {"fe80::1%eth0", "\"%\""},
      {"[fe80::1%25eth0]", "\"%\""},
      {"example .com", "space"},
      {" example.com", "space"},
      {"example.com\\@evil.com", "backslash"},
      {"user@example.com", "\"@\""},
      {"example.com/path", "\"/\""},
      {"under_score.example", "\"_\""},
      {"*.example.com", "\"*\""},
      {"example.com#x", "\"#\""},
      {"example..com", "empty label"},
      {".example.com", "empty label"},
      {"example.com..", "empty label"},
      {"-example.com", "\"-\""},
      {long_label + ".com", "63"},
      {long_name, "253"},
      // Numbers out of range or ambiguous.
      {"4294967296", "number"},
      {"256.1.1.1", "over 255"},
      {"1.256.1.1", "over 255"},
      {"1.2.3.256", "over 255"},
      {"1.16777216", "over 16777215"},
      {"1.2.65536", "over 65535"},
      {"1.2.3.4.5", "at most four parts"},
      {"08", "\"08\""},
      {"0x", "\"0x\""},
      {"example.123", "\"example\""},
      {"example.0x1f", "\"example\""},
      // IPv6 oddities.
      {"[::1", "brackets"},
      {"::1]", "brackets"},
      {"[1.2.3.4]", "IPv6"},
      {"[]", "IPv6"},
      {"[::1]:80", "IPv6"},
      {"[[::1]]", "IPv6"},
      {"1:2:3:4:5:6:7:8:9", "IPv6"},
      {"[::1].", "brackets"},
      {"example.com:80", "IPv6"},
      // Embedded IPv4 inside IPv6 text must be a strict dotted quad.
      {"[::ffff:0177.0.0.1]", "IPv6"},
      {"[::ffff:127.1]", "IPv6"},
      {"[::ffff:127.000.0.1]", "IPv6"},
      {"[::ffff:0x7f.0.0.1]", "IPv6"},
      {"[1::2::3]", "IPv6"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<CanonicalHost> host = CanonicalizeHost(c.raw);
    ASSERT_FALSE(host.ok()) << c.raw << " gave " << host->text;
    EXPECT_EQ(host.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(host.status().message(), HasSubstr(c.why)) << c.raw;
  }
}

TEST(ParseAuthorityTest, SplitsHostAndPort) {
  struct Case {
    absl::string_view authority;
    uint16_t default_port;
    absl::string_view host;
    uint16_t port;
  } cases[] = {
      {"example.com:443", 0, "example.com", 443},
      {"Example.COM.:8080", 80, "example.com", 8080},
      {"example.com", 80, "example.com", 80},
      {"127.1:22", 0, "127.0.0.1", 22},
      {"2852039166:80", 0, "169.254.169.254", 80},
      {"[::1]:443", 0, "::1", 443},
      {"[::1]", 443, "::1", 443},
      {"[::ffff:7f00:1]:80", 0, "127.0.0.1", 80},
      {"x.example:1", 0, "x.example", 1},
      {"x.example:65535", 0, "x.example", 65535},
  };
  for (const auto& c : cases) {
    absl::StatusOr<HostPort> hp = ParseAuthority(c.authority, c.default_port);
    ASSERT_TRUE(hp.ok()) << c.authority << ": " << hp.status();
    EXPECT_EQ(hp->host.text, c.host) << c.authority;
    EXPECT_EQ(hp->port, c.port) << c.authority;
  }
}

TEST(ParseAuthorityTest, RefusesBadAuthorities) {
  struct Case {
    std::string authority;
    uint16_t default_port;
    absl::string_view why;
  } cases[] = {
      {"", 80, "empty"},
      {"example.com", 0, "port is required"},
      {"[::1]", 0, "port is required"},
      {"example.com:", 80, "1 to 65535"},
      {"example.com:0", 80, "1 to 65535"},
      {"example.com:080", 80, "1 to 65535"},
      {"example.com:65536", 80, "over 65535"},
      {"example.com:99999", 80, "over 65535"},
      {"example.com:123456", 80, "1 to 65535"},
      {"example.com:+80", 80, "1 to 65535"},
      {"example.com:-1", 80, "1 to 65535"},
      {"example.com:0x50", 80, "1 to 65535"},
      {"example.com: 80", 80, "1 to 65535"},
      {"example.com:80 ", 80, "1 to 65535"},
      {std::string("example.com:80\0", 15), 80, "1 to 65535"},
      {"example.com:443:80", 80, "brackets"},
      {"::1", 80, "brackets"},
      {"::1:443", 80, "brackets"},
      {"[::1]443", 80, "only \":port\""},
      {"[::1", 80, "missing \"]\""},
      {"[::1]:", 80, "1 to 65535"},
      {"user@example.com:80", 80, "\"@\""},
      {"evil.com\\@example.com:80", 80, "backslash"},
      {std::string("evil.com\0example.com:80", 23), 80, "NUL"},
      {":80", 80, "empty"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<HostPort> hp = ParseAuthority(c.authority, c.default_port);
    ASSERT_FALSE(hp.ok()) << c.authority << " gave " << hp->host.text << ":" << hp->port;
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(hp.status().message(), HasSubstr(c.why)) << c.authority;
  }
}

}  // namespace
}  // namespace moat::egress
