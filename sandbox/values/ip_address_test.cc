#include "sandbox/values/ip_address.h"

#include <arpa/inet.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::egress {
namespace {

using ::testing::HasSubstr;

IpAddress Ip(absl::string_view text) {
  std::optional<IpAddress> a = IpAddress::Parse(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(IpAddress::V4(0));
}

Cidr Range(absl::string_view text) {
  absl::StatusOr<Cidr> c = Cidr::Parse(text);
  EXPECT_TRUE(c.ok()) << text << ": " << c.status();
  return c.ok() ? *c : *Cidr::Parse("0.0.0.0/32");
}

TEST(IpAddressTest, ParsesStrictTextAndPrintsRfc5952) {
  struct Case {
    absl::string_view text;
    absl::string_view printed;
    bool v4;
  } cases[] = {
      {"10.0.0.1", "10.0.0.1", true},
      {"0.0.0.0", "0.0.0.0", true},
      {"255.255.255.255", "255.255.255.255", true},
      {"::1", "::1", false},
      {"::", "::", false},
      {"FD00:EC2::254", "fd00:ec2::254", false},
      {"2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1", false},
      {"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1", false},
      {"::ffff:1.2.3.4", "::ffff:1.2.3.4", false},
      {"::ffff:7f00:1", "::ffff:127.0.0.1", false},
  };
  for (const auto& c : cases) {
    std::optional<IpAddress> a = IpAddress::Parse(c.text);
    ASSERT_TRUE(a.has_value()) << c.text;
    EXPECT_EQ(a->is_v4(), c.v4) << c.text;
    EXPECT_EQ(a->ToString(), c.printed) << c.text;
    EXPECT_EQ(IpAddress::Parse(a->ToString()), a) << c.text;
  }
  EXPECT_EQ(Ip("10.1.2.3").v4(), 0x0a010203u);
}

TEST(IpAddressTest, RefusesEverythingButStrictText) {
  for (absl::string_view text : {"",
                                 "127.1",
                                 "2130706433",
                                 "0x7f.0.0.1",
                                 "0177.0.0.1",
                                 "010.0.0.1",
                                 "1.2.3.4.5",
                                 "1.2.3",
                                 "256.0.0.1",
                                 "1.2.3.4.",
                                 ".1.2.3.4",
                                 "1..2.3",
                                 " 1.2.3.4",
                                 "1.2.3.4 ",
                                 "[::1]",
                                 "fe80::1%eth0",
                                 "fe80::1%25eth0",
                                 "::1/128",
                                 "1:2:3:4:5:6:7:8:9",
                                 ":::",
                                 "::g",
                                 "example.com",
                                 "-1.2.3.4",
                                 "+1.2.3.4",
                                 "1.2.3.04"}) {
    EXPECT_FALSE(IpAddress::Parse(text).has_value()) << text;
  }
  // An embedded NUL must not cut the text short for inet_pton.
  EXPECT_FALSE(IpAddress::Parse(absl::string_view("::1\0:5", 6)).has_value());
  EXPECT_FALSE(IpAddress::Parse(absl::string_view("1.2.3.4\0", 8)).has_value());
}

TEST(IpAddressTest, SockaddrRoundTrip) {
  for (absl::string_view text : {"192.0.2.7", "2001:db8::7", "::ffff:10.0.0.1"}) {
    IpAddress a = Ip(text);
    struct sockaddr_storage ss;
    socklen_t len = a.ToSockaddr(8443, &ss);
    if (a.is_v4()) {
      ASSERT_EQ(len, sizeof(sockaddr_in));
      const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
      EXPECT_EQ(in->sin_family, AF_INET);
      EXPECT_EQ(ntohs(in->sin_port), 8443);
      EXPECT_EQ(ntohl(in->sin_addr.s_addr), a.v4());
    } else {
      ASSERT_EQ(len, sizeof(sockaddr_in6));
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
      EXPECT_EQ(in6->sin6_family, AF_INET6);
      EXPECT_EQ(ntohs(in6->sin6_port), 8443);
      char buf[INET6_ADDRSTRLEN];
      ASSERT_NE(inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf)), nullptr);
      EXPECT_EQ(Ip(buf), a);
    }
    EXPECT_EQ(IpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&ss)), a) << text;
  }
  struct sockaddr_storage unix_addr {};
  unix_addr.ss_family = AF_UNIX;
  EXPECT_FALSE(IpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&unix_addr)));
  EXPECT_FALSE(IpAddress::FromSockaddr(nullptr));
}

TEST(IpAddressTest, UnmapsEmbeddedIpv4) {
  EXPECT_EQ(Ip("::ffff:127.0.0.1").Unmapped(), Ip("127.0.0.1"));
  EXPECT_EQ(Ip("::ffff:7f00:1").Unmapped(), Ip("127.0.0.1"));
  EXPECT_EQ(Ip("::169.254.169.254").Unmapped(), Ip("169.254.169.254"));
  EXPECT_EQ(Ip("64:ff9b::10.0.0.1").Unmapped(), Ip("10.0.0.1"));
  EXPECT_EQ(Ip("64:ff9b::a00:1").Unmapped(), Ip("10.0.0.1"));
  // Not embeddings: IPv6's own :: and ::1, other prefixes, and IPv4 itself.
  for (absl::string_view same : {"::", "::1", "2001:db8::a00:1", "64:ff9b:1::a00:1", "::fffe:a00:1",
                                 "1::ffff:a00:1", "10.0.0.1"}) {
    EXPECT_EQ(Ip(same).Unmapped(), Ip(same)) << same;
  }
}

TEST(CidrTest, ParsesAndNormalises) {
  struct Case {
    absl::string_view text;
    absl::string_view normalised;
  } cases[] = {
      {"10.0.0.0/8", "10.0.0.0/8"},
      {"192.0.2.7", "192.0.2.7/32"},
      {"0.0.0.0/0", "0.0.0.0/0"},
      {"fd00::/8", "fd00::/8"},
      {"FD00:0::/8", "fd00::/8"},
      {"::1", "::1/128"},
      {"::/0", "::/0"},
      // IPv4-mapped ranges are IPv4 ranges.
      {"::ffff:127.0.0.0/104", "127.0.0.0/8"},
      {"::ffff:10.1.2.3", "10.1.2.3/32"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Cidr> cidr = Cidr::Parse(c.text);
    ASSERT_TRUE(cidr.ok()) << c.text << ": " << cidr.status();
    EXPECT_EQ(cidr->ToString(), c.normalised);
    EXPECT_EQ(*Cidr::Parse(cidr->ToString()), *cidr);
  }
  EXPECT_EQ(Range("10.0.0.0/8").prefix_length(), 8);
  EXPECT_EQ(Range("10.0.0.0/8").base(), Ip("10.0.0.0"));
}

TEST(CidrTest, RefusesBadRangesWithAReason) {
  struct Case {
    absl::string_view text;
    absl::string_view why;
  } cases[] = {
      {"10.0.0.1/8", "did you mean \"10.0.0.0/8\""},
      {"fd00::1/8", "did you mean \"fd00::/8\""},
      {"10.0.0.0/33", "from 0 to 32"},
      {"fd00::/129", "from 0 to 128"},
      {"10.0.0.0/", "from 0 to 32"},
      {"10.0.0.0/08", "from 0 to 32"},
      {"10.0.0.0/-1", "from 0 to 32"},
      {"10.0.0.0/8/8", "from 0 to 32"},
      {"10/8", "not an IPv4 address"},
      {"localhost/8", "not an IPv4 address"},
      {"", "not an IPv4 address"},
      {"[::1]/128", "not an IPv4 address"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Cidr> cidr = Cidr::Parse(c.text);
    ASSERT_FALSE(cidr.ok()) << c.text;
    EXPECT_EQ(cidr.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(cidr.status().message(), HasSubstr(c.why)) << c.text;
  }
}

TEST(CidrTest, Contains) {
  Cidr ten = Range("10.0.0.0/8");
  EXPECT_TRUE(ten.Contains(Ip("10.0.0.0")));
  EXPECT_TRUE(ten.Contains(Ip("10.255.255.255")));
  EXPECT_FALSE(ten.Contains(Ip("11.0.0.0")));
  EXPECT_FALSE(ten.Contains(Ip("9.255.255.255")));
  // IPv4 ranges hold the mapped and embedded forms of their addresses.
  EXPECT_TRUE(ten.Contains(Ip("::ffff:10.1.2.3")));
  EXPECT_TRUE(ten.Contains(Ip("64:ff9b::10.1.2.3")));
  EXPECT_FALSE(ten.Contains(Ip("::ffff:11.1.2.3")));
  EXPECT_FALSE(ten.Contains(Ip("fd00::a01:203")));

  EXPECT_TRUE(Range("0.0.0.0/0").Contains(Ip("203.0.113.9")));
  EXPECT_FALSE(Range("0.0.0.0/0").Contains(Ip("2001:db8::1")));
  EXPECT_TRUE(Range("192.0.2.7").Contains(Ip("192.0.2.7")));
  EXPECT_FALSE(Range("192.0.2.7").Contains(Ip("192.0.2.6")));

  Cidr fd = Range("fd00::/8");
  EXPECT_TRUE(fd.Contains(Ip("fd12:3456::1")));
  EXPECT_FALSE(fd.Contains(Ip("fc00::1")));
  EXPECT_FALSE(fd.Contains(Ip("10.0.0.1")));
  EXPECT_TRUE(Range("fe80::/10").Contains(Ip("febf::1")));
  EXPECT_FALSE(Range("fe80::/10").Contains(Ip("fec0::1")));
  // An IPv6 range never covers an address that embeds IPv4: that is judged as the IPv4 address.
  EXPECT_TRUE(Range("::/0").Contains(Ip("::1")));
  EXPECT_FALSE(Range("::/0").Contains(Ip("::ffff:127.0.0.1")));
  EXPECT_FALSE(Range("64:ff9b::/96").Contains(Ip("64:ff9b::127.0.0.1")));
}

TEST(SpecialPurposeTest, ClassifiesEachRange) {
  struct Case {
    absl::string_view address;
    absl::string_view reason;
  } cases[] = {
      {"0.0.0.0", "unspecified (0.0.0.0/8, \"this network\")"},
      {"0.1.2.3", "unspecified (0.0.0.0/8, \"this network\")"},
      {"127.0.0.1", "loopback (127.0.0.0/8)"},
      {"127.255.255.254", "loopback (127.0.0.0/8)"},
      {"10.0.0.1", "private (10.0.0.0/8)"},
      {"172.16.0.1", "private (172.16.0.0/12)"},
      {"172.31.255.255", "private (172.16.0.0/12)"},
      {"192.168.1.4", "private (192.168.0.0/16)"},
      {"100.64.0.1", "carrier-grade NAT (100.64.0.0/10)"},
      {"100.127.255.255", "carrier-grade NAT (100.64.0.0/10)"},
      {"169.254.1.1", "link-local (169.254.0.0/16)"},
      {"169.254.169.254", "cloud metadata"},
      {"100.100.100.200", "cloud metadata"},
      {"168.63.129.16", "cloud metadata"},
      {"192.0.0.8", "reserved (192.0.0.0/24, IETF protocol assignments)"},
      {"192.0.2.1", "documentation (192.0.2.0/24)"},
      {"198.51.100.1", "documentation (198.51.100.0/24)"},
      {"203.0.113.1", "documentation (203.0.113.0/24)"},
      {"198.18.0.1", "benchmarking (198.18.0.0/15)"},
      {"198.19.255.255", "benchmarking (198.18.0.0/15)"},
      {"224.0.0.1", "multicast (224.0.0.0/4)"},
      {"239.255.255.250", "multicast (224.0.0.0/4)"},
      {"240.0.0.1", "reserved (240.0.0.0/4)"},
      {"255.255.255.255", "broadcast"},
      {"::", "unspecified"},
      {"::1", "loopback"},
      {"fe80::1", "link-local (fe80::/10)"},
      {"fc00::1", "private (fc00::/7, unique-local)"},
      {"fd12::1", "private (fc00::/7, unique-local)"},
      {"fd00:ec2::254", "cloud metadata"},
      {"ff02::1", "multicast (ff00::/8)"},
      {"2001:db8::1", "documentation (2001:db8::/32)"},
      {"100::1", "discard-only (100::/64)"},
      {"fec0::1", "site-local (fec0::/10)"},
      {"64:ff9b:1::1", "reserved (outside 2000::/3)"},
      // Embedded IPv4 is judged as the IPv4 address.
      {"::ffff:127.0.0.1", "loopback (127.0.0.0/8)"},
      {"::ffff:169.254.169.254", "cloud metadata"},
      {"::10.0.0.1", "private (10.0.0.0/8)"},
      {"64:ff9b::a9fe:a9fe", "cloud metadata"},
      {"::ffff:0.0.0.0", "unspecified (0.0.0.0/8, \"this network\")"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(SpecialPurpose(Ip(c.address)), std::string(c.reason)) << c.address;
  }
}

TEST(SpecialPurposeTest, PublicUnicastIsNotSpecial) {
  for (absl::string_view address :
       {"1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0",
        "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.167.255.255",
        "192.169.0.0", "198.17.255.255", "198.20.0.0", "223.255.255.255", "2606:4700::1111",
        "2a00:1450::1", "::ffff:8.8.8.8", "64:ff9b::808:808"}) {
    EXPECT_EQ(SpecialPurpose(Ip(address)), std::nullopt) << address;
  }
}

TEST(AddressPolicyTest, DeniesSpecialAddressesWithTheReason) {
  AddressPolicy policy({}, {});
  EXPECT_TRUE(policy.Check(Ip("93.184.216.34")).ok());
  absl::Status s = policy.Check(Ip("169.254.169.254"));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "address 169.254.169.254 is cloud metadata");
  EXPECT_EQ(policy.Check(Ip("127.0.0.1")).message(), "address 127.0.0.1 is loopback (127.0.0.0/8)");
  EXPECT_EQ(policy.Check(Ip("::ffff:127.0.0.1")).message(),
            "address ::ffff:127.0.0.1 (127.0.0.1) is loopback (127.0.0.0/8)");
  EXPECT_EQ(policy.Check(Ip("::1")).code(), absl::StatusCode::kPermissionDenied);
}

TEST(AddressPolicyTest, HostAddressesAreDenied) {
  AddressPolicy policy({}, {Ip("93.184.216.34"), Ip("192.168.1.4"), Ip("2606:4700::1")});
  EXPECT_EQ(policy.Check(Ip("93.184.216.34")).message(),
            "address 93.184.216.34 is one of this host's");
  EXPECT_EQ(policy.Check(Ip("::ffff:93.184.216.34")).message(),
            "address ::ffff:93.184.216.34 (93.184.216.34) is one of this host's");
  // A host address in a special range is refused for its class, which says more.
  EXPECT_EQ(policy.Check(Ip("192.168.1.4")).message(),
            "address 192.168.1.4 is private (192.168.0.0/16)");
  EXPECT_EQ(policy.Check(Ip("2606:4700::1")).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(policy.Check(Ip("93.184.216.35")).ok());
  EXPECT_TRUE(policy.Check(Ip("2606:4700::2")).ok());
}

TEST(AddressPolicyTest, AllowedCidrsOverrideEverything) {
  AddressPolicy policy({Range("127.0.0.0/8"), Range("10.1.0.0/16"), Range("fd00::/8")},
                       {Ip("10.1.2.3"), Ip("93.184.216.40")});
  EXPECT_TRUE(policy.Check(Ip("127.0.0.1")).ok());
  EXPECT_TRUE(policy.Check(Ip("::ffff:127.0.0.1")).ok());
  EXPECT_TRUE(policy.Check(Ip("10.1.200.1")).ok());
  EXPECT_TRUE(policy.Check(Ip("10.1.2.3")).ok());  // the host's own, but listed
  EXPECT_TRUE(policy.Check(Ip("fd00:ec2::254")).ok());
  // Outside the listed ranges the usual checks still apply.
  EXPECT_EQ(policy.Check(Ip("10.2.0.1")).message(), "address 10.2.0.1 is private (10.0.0.0/8)");
  EXPECT_EQ(policy.Check(Ip("93.184.216.40")).message(),
            "address 93.184.216.40 is one of this host's");
  EXPECT_EQ(policy.Check(Ip("::1")).message(), "address ::1 is loopback");
  EXPECT_EQ(policy.Check(Ip("169.254.169.254")).message(),
            "address 169.254.169.254 is cloud metadata");
}

TEST(HostAddressesTest, IncludesLoopback) {
  absl::StatusOr<std::vector<IpAddress>> addresses = HostAddresses();
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  // Every network namespace has lo; it is up wherever these tests run, so 127.0.0.1 is listed.
  EXPECT_THAT(*addresses, ::testing::Contains(Ip("127.0.0.1")));
  EXPECT_TRUE(std::is_sorted(addresses->begin(), addresses->end()));
  EXPECT_EQ(std::adjacent_find(addresses->begin(), addresses->end()), addresses->end());
}

}  // namespace
}  // namespace moat::egress
