#include "sandbox/values/domain_pattern.h"

#include <initializer_list>
#include <string>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::sandbox {
namespace {

using ::testing::HasSubstr;
using Kind = DomainPattern::ListKind;

DomainPattern MustParse(absl::string_view text, Kind kind = Kind::kAllow) {
  absl::StatusOr<DomainPattern> p = DomainPattern::Parse(text, kind);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p.ok() ? *p : *DomainPattern::Parse("unused.invalid");
}

TEST(DomainPatternParseTest, NormalisesCaseTrailingDotAndPort) {
  struct Case {
    absl::string_view text;
    absl::string_view normalised;
  } cases[] = {
      {"example.com", "example.com"},
      {"Example.COM", "example.com"},
      {"example.com.", "example.com"},
      {"*.Example.com.", "*.example.com"},
      {"api.x.com:443", "api.x.com:443"},
      {"API.X.COM.:8443", "api.x.com:8443"},
      {"localhost", "localhost"},
      {"192.0.2.1", "192.0.2.1"},
      {"192.0.2.1:80", "192.0.2.1:80"},
      {"0.0.0.0", "0.0.0.0"},
      {"xn--bcher-kva.example", "xn--bcher-kva.example"},
      {"a-b.c-d.example", "a-b.c-d.example"},
      {"1.2.3.example", "1.2.3.example"},
      {"x.com:65535", "x.com:65535"},
      {"x.com:1", "x.com:1"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<DomainPattern> p = DomainPattern::Parse(c.text);
    ASSERT_TRUE(p.ok()) << c.text << ": " << p.status();
    EXPECT_EQ(p->ToString(), c.normalised);
    // The normalised form parses back to the same pattern.
    EXPECT_EQ(*DomainPattern::Parse(p->ToString()), *p) << c.text;
  }
}

TEST(DomainPatternParseTest, ExposesItsParts) {
  DomainPattern p = MustParse("*.Example.com:443");
  EXPECT_TRUE(p.is_wildcard());
  EXPECT_FALSE(p.is_any());
  EXPECT_FALSE(p.is_ipv4());
  EXPECT_EQ(p.host(), "example.com");
  EXPECT_EQ(p.port(), 443);

  DomainPattern ip = MustParse("10.1.2.3");
  EXPECT_TRUE(ip.is_ipv4());
  EXPECT_FALSE(ip.port().has_value());

  DomainPattern any = MustParse("*", Kind::kDeny);
  EXPECT_TRUE(any.is_any());
  EXPECT_EQ(any.ToString(), "*");
}

TEST(DomainPatternParseTest, RejectsBadSyntaxWithAReason) {
  struct Case {
    absl::string_view text;
    absl::string_view reason;
  } cases[] = {
      {"", "empty"},
      {"https://example.com", "URL"},
      {"example.com/path", "\"/\""},
      {"user@example.com", "\"@\""},
      {"exa%6dple.com", "\"%\""},
      {"my_host.example.com", "\"_\""},
      {"example .com", "space"},
      {"exa\tmple.com", "control byte"},
      {"exa\x7fmple.com", "control byte"},
      {"b\xc3\xbc"
       "cher.example",
       "punycode"},
      {"[::1]", "IPv6"},
      {"::1", "IPv6"},
      {"fe80::1:443", "IPv6"},
      {"example..com", "empty label"},
      {".example.com", "empty label"},
      {"example.com..", "empty label"},
      {".", "empty"},
      {"*example.com", "first label"},
      {"a.*.example.com", "first label"},
      {"*.*.example.com", "first label"},
      {"example.*", "first label"},
      {"**.example.com", "first label"},
      {"-bad.example.com", "\"-\""},
      {"bad-.example.com", "\"-\""},
      {"example.com:0", "port"},
      {"example.com:65536", "port"},
      {"example.com:", "port"},
      {"example.com:044", "port"},
      {"example.com:+44", "character"},
      {"example.com:http", "port"},
      {":443", "empty"},
      {"2130706433", "dotted-quad"},
      {"127.1", "dotted-quad"},
      {"0x7f.0.0.1", "dotted-quad"},
      {"010.0.0.1", "dotted-quad"},
      {"256.0.0.1", "dotted-quad"},
      {"1.2.3.4.5", "dotted-quad"},
      {"*.0.0.1", "dotted-quad"},
      {"0x7f000001", "dotted-quad"},
      {"127.0.0.0x1", "dotted-quad"},
      {"a.0x", "dotted-quad"},
      {"example.com!", "character"},
      {"exa=mple.com", "character"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<DomainPattern> p = DomainPattern::Parse(c.text, Kind::kDeny);
    ASSERT_FALSE(p.ok()) << c.text << " parsed as " << p->ToString();
    EXPECT_THAT(p.status().message(), HasSubstr(std::string(c.reason))) << c.text;
    EXPECT_THAT(p.status().message(), HasSubstr("invalid domain")) << c.text;
  }
}

TEST(DomainPatternParseTest, RejectsNulByte) {
  absl::StatusOr<DomainPattern> p = DomainPattern::Parse(absl::string_view("a.com\0.evil", 11));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("NUL"));
}

TEST(DomainPatternParseTest, RejectsOverlongLabelsAndNames) {
  std::string label63(63, 'a');
  EXPECT_TRUE(DomainPattern::Parse(label63 + ".com").ok());
  EXPECT_FALSE(DomainPattern::Parse(label63 + "a.com").ok());
  // 4 labels of 63 plus 3 dots = 255 characters: too long; 253 is the limit.
  std::string name = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  ASSERT_EQ(name.size(), 253u);
  EXPECT_TRUE(DomainPattern::Parse(name).ok());
  EXPECT_FALSE(DomainPattern::Parse(name + "b").ok());
}

TEST(DomainPatternParseTest, AllowListsRefuseEverythingAndTopLevelWildcards) {
  for (absl::string_view text : {"*", "*:443", "*.", "*.com", "*.com:443"}) {
    EXPECT_FALSE(DomainPattern::Parse(text, Kind::kAllow).ok()) << text;
    EXPECT_TRUE(DomainPattern::Parse(text, Kind::kDeny).ok()) << text;
  }
  EXPECT_TRUE(DomainPattern::Parse("*.co.uk", Kind::kAllow).ok());
}

TEST(DomainPatternMatchesTest, ExactMatchesOnlyThatHost) {
  DomainPattern p = MustParse("example.com");
  EXPECT_TRUE(p.Matches("example.com", 443));
  EXPECT_TRUE(p.Matches("EXAMPLE.com.", 80));
  for (absl::string_view host :
       {"www.example.com", "example.com.evil.net", "notexample.com", "example.co"}) {
    EXPECT_FALSE(p.Matches(host, 443)) << host;
  }
}

TEST(DomainPatternMatchesTest, WildcardMatchesSubdomainsOnly) {
  DomainPattern p = MustParse("*.example.com");
  for (absl::string_view host : {"a.example.com", "a.b.example.com", "A.Example.Com."}) {
    EXPECT_TRUE(p.Matches(host, 443)) << host;
  }
  for (absl::string_view host :
       {"example.com", "badexample.com", "a.example.com.evil.net", ".example.com"}) {
    EXPECT_FALSE(p.Matches(host, 443)) << host;
  }
}

TEST(DomainPatternMatchesTest, PortRestrictsWhenGiven) {
  DomainPattern p = MustParse("api.x.com:443");
  EXPECT_TRUE(p.Matches("api.x.com", 443));
  EXPECT_FALSE(p.Matches("api.x.com", 80));
  DomainPattern any_port = MustParse("api.x.com");
  EXPECT_TRUE(any_port.Matches("api.x.com", 80));
  EXPECT_TRUE(any_port.Matches("api.x.com", 8443));
}

TEST(DomainPatternMatchesTest, DenyAnyMatchesEveryValidHost) {
  DomainPattern any = MustParse("*", Kind::kDeny);
  EXPECT_TRUE(any.Matches("example.com", 1));
  EXPECT_TRUE(any.Matches("10.0.0.1", 22));
  DomainPattern ssh = MustParse("*:22", Kind::kDeny);
  EXPECT_TRUE(ssh.Matches("github.com", 22));
  EXPECT_FALSE(ssh.Matches("github.com", 443));
}

TEST(DomainPatternMatchesTest, Ipv4MatchesOnlyTheCanonicalQuad) {
  DomainPattern p = MustParse("127.0.0.1");
  EXPECT_TRUE(p.Matches("127.0.0.1", 80));
  for (absl::string_view host :
       {"2130706433", "127.1", "0177.0.0.1", "0x7f000001", "127.0.0.0x1", "127.0.0.10"}) {
    EXPECT_FALSE(p.Matches(host, 80)) << host;
  }
}

TEST(DomainPatternMatchesTest, InvalidHostsNeverMatch) {
  DomainPattern p = MustParse("*.example.com");
  DomainPattern any = MustParse("*", Kind::kDeny);
  for (absl::string_view host : {"", "a b.example.com", "a_b.example.com", "x.example.com:443",
                                 "*.example.com", "a..example.com", "user@a.example.com"}) {
    EXPECT_FALSE(p.Matches(host, 443)) << host;
    EXPECT_FALSE(any.Matches(host, 443)) << host;
  }
  EXPECT_FALSE(p.Matches(absl::string_view("a.example.com\0", 14), 443));
  EXPECT_FALSE(p.Matches(absl::string_view("evil\0.example.com", 17), 443));
}

TEST(DomainPatternCoversTest, ExactCoversOnlyItself) {
  DomainPattern p = MustParse("example.com");
  EXPECT_TRUE(p.Covers(MustParse("example.com")));
  EXPECT_TRUE(p.Covers(MustParse("example.com:443")));
  EXPECT_FALSE(p.Covers(MustParse("www.example.com")));
  EXPECT_FALSE(p.Covers(MustParse("*.example.com")));
}

TEST(DomainPatternCoversTest, WildcardCoversSubdomainsAndNarrowerWildcards) {
  DomainPattern p = MustParse("*.example.com");
  for (absl::string_view other :
       {"a.example.com", "*.example.com", "*.a.example.com", "a.example.com:443"}) {
    EXPECT_TRUE(p.Covers(MustParse(other))) << other;
  }
  EXPECT_FALSE(p.Covers(MustParse("example.com")));
  EXPECT_FALSE(p.Covers(MustParse("badexample.com")));
  EXPECT_FALSE(p.Covers(MustParse("*.com", Kind::kDeny)));
  EXPECT_FALSE(p.Covers(MustParse("*", Kind::kDeny)));
}

TEST(DomainPatternCoversTest, PortPatternsCoverOnlyTheSamePort) {
  DomainPattern p = MustParse("*.example.com:443");
  EXPECT_TRUE(p.Covers(MustParse("a.example.com:443")));
  EXPECT_FALSE(p.Covers(MustParse("a.example.com")));  // any port is wider than 443
  EXPECT_FALSE(p.Covers(MustParse("a.example.com:80")));
}

TEST(DomainPatternCoversTest, Ipv4CoversOnlyItself) {
  DomainPattern p = MustParse("10.0.0.1");
  EXPECT_TRUE(p.Covers(MustParse("10.0.0.1:80")));
  EXPECT_FALSE(p.Covers(MustParse("10.0.0.2")));
}

TEST(CanonicalHostTest, CanonicalisesAndValidates) {
  EXPECT_EQ(*CanonicalHost("WWW.Example.COM."), "www.example.com");
  EXPECT_EQ(*CanonicalHost("192.0.2.1"), "192.0.2.1");
  EXPECT_FALSE(CanonicalHost("*.example.com").ok());
  EXPECT_FALSE(CanonicalHost("example.com:443").ok());
  EXPECT_FALSE(CanonicalHost("0x7f000001").ok());
  EXPECT_FALSE(CanonicalHost("").ok());
}

}  // namespace
}  // namespace moat::sandbox
