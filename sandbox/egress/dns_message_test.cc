#include "sandbox/egress/dns_message.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/testing/ip_literals.h"
#include "sandbox/values/ip_address.h"

namespace moat::egress {
namespace {

using testing::V4;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Writes DNS messages byte by byte, so tests can build the malformed ones too.
class Wire {
 public:
  Wire& U8(uint8_t v) {
    bytes_.push_back(v);
    return *this;
  }
  Wire& U16(uint16_t v) { return U8(v >> 8).U8(v & 0xFF); }
  Wire& U32(uint32_t v) { return U16(v >> 16).U16(v & 0xFFFF); }
  Wire& Header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar) {
    return U16(id).U16(flags).U16(qd).U16(an).U16(ns).U16(ar);
  }
  // Uncompressed labels, then the root.
  Wire& Name(absl::string_view name) {
    Labels(name);
    return U8(0);
  }
  Wire& Labels(absl::string_view name) {
    for (absl::string_view label : absl::StrSplit(name, '.', absl::SkipEmpty())) {
      U8(static_cast<uint8_t>(label.size()));
      bytes_.insert(bytes_.end(), label.begin(), label.end());
    }
    return *this;
  }
  Wire& Pointer(uint16_t offset) { return U16(0xC000 | offset); }
  Wire& Question(absl::string_view name, uint16_t type, uint16_t klass = kDnsClassIn) {
    return Name(name).U16(type).U16(klass);
  }
  // Type, class, TTL, then rdata of `data_length` (the caller writes the data).
  Wire& RecordTail(uint16_t type, uint32_t ttl, uint16_t data_length) {
    return U16(type).U16(kDnsClassIn).U32(ttl).U16(data_length);
  }
  Wire& A(uint32_t ttl, uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return RecordTail(kDnsTypeA, ttl, 4).U8(a).U8(b).U8(c).U8(d);
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

constexpr uint16_t kQuery = 0x0100;     // RD
constexpr uint16_t kResponse = 0x8180;  // QR RD RA

// A response (id 1) to the A question for "a.test" that announces `answers` records; the test
// writes them.
Wire ResponseForATest(uint16_t answers) {
  Wire wire;
  wire.Header(1, kResponse, 1, answers, 0, 0).Question("a.test", kDnsTypeA);
  return wire;
}

IpAddress V6Loopback() {
  std::array<uint8_t, 16> bytes{};
  bytes[15] = 1;
  return IpAddress::V6(bytes);
}

TEST(DnsMessageTest, QueryRoundTrip) {
  const std::vector<uint8_t> wire = BuildDnsQuery(0xBEEF, "Pypi.Org", kDnsTypeAaaa);
  absl::StatusOr<DnsQuery> query = ParseDnsQuery(wire);
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->id, 0xBEEF);
  EXPECT_TRUE(query->recursion_desired);
  EXPECT_EQ(query->question.name, "Pypi.Org");  // case is kept: callers canonicalise
  EXPECT_EQ(query->question.type, kDnsTypeAaaa);
  EXPECT_EQ(query->question.klass, kDnsClassIn);
}

TEST(DnsMessageTest, QueryTrailingDotIsTheSameName) {
  EXPECT_EQ(BuildDnsQuery(7, "example.com.", kDnsTypeA),
            BuildDnsQuery(7, "example.com", kDnsTypeA));
}

TEST(DnsMessageTest, ResponseRoundTripKeepsOnlyTheAskedFamily) {
  DnsQuery query;
  query.id = 42;
  query.recursion_desired = true;
  query.question = {"files.example.com", kDnsTypeA, kDnsClassIn};
  const std::vector<IpAddress> answers = {V4(192, 0, 2, 1), V6Loopback(), V4(192, 0, 2, 2)};
  const std::vector<uint8_t> wire = BuildDnsResponse(query, kDnsNoError, answers, 60);
  absl::StatusOr<DnsResponse> response = ParseDnsResponse(wire);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->id, 42);
  EXPECT_EQ(response->rcode, kDnsNoError);
  EXPECT_FALSE(response->truncated);
  EXPECT_EQ(response->question.name, "files.example.com");
  EXPECT_EQ(response->question.type, kDnsTypeA);
  EXPECT_THAT(response->addresses, ElementsAre(V4(192, 0, 2, 1), V4(192, 0, 2, 2)));
  EXPECT_EQ(response->min_ttl, 60u);
  // QR, RD echoed, RA.
  EXPECT_EQ(wire[2], 0x81);
  EXPECT_EQ(wire[3], 0x80);

  query.question.type = kDnsTypeAaaa;
  response = ParseDnsResponse(BuildDnsResponse(query, kDnsNoError, answers, 5));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->addresses, ElementsAre(V6Loopback()));
}

TEST(DnsMessageTest, NxDomainResponse) {
  DnsQuery query;
  query.id = 9;
  query.question = {"evil.test", kDnsTypeA, kDnsClassIn};
  const std::vector<uint8_t> wire = BuildDnsResponse(query, kDnsNxDomain, {V4(1, 2, 3, 4)}, 60);
  absl::StatusOr<DnsResponse> response = ParseDnsResponse(wire);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->rcode, kDnsNxDomain);
  // The answerer decides; a NXDOMAIN with addresses would be the caller's bug, but the builder
  // does what it is told.
  EXPECT_EQ(wire[3] & 0xF, kDnsNxDomain);
  EXPECT_EQ(wire[2] & 0x01, 0);  // RD not set when the query did not ask for it
}

TEST(DnsMessageTest, RootNameRoundTrips) {
  absl::StatusOr<DnsQuery> query = ParseDnsQuery(BuildDnsQuery(1, "", kDnsTypeA));
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->question.name, "");
}

TEST(DnsMessageTest, QueryWithEdnsRecordIsAccepted) {
  Wire wire;
  wire.Header(5, kQuery, 1, 0, 0, 1).Question("example.com", kDnsTypeA);
  wire.U8(0).U16(41).U16(1232).U32(0).U16(0);  // OPT: root owner, payload size, no options
  absl::StatusOr<DnsQuery> query = ParseDnsQuery(wire.bytes());
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->question.name, "example.com");
}

TEST(DnsMessageTest, EveryTruncationOfAQueryIsRefused) {
  Wire wire;
  wire.Header(5, kQuery, 1, 0, 0, 1).Question("example.com", kDnsTypeA);
  wire.U8(0).U16(41).U16(1232).U32(0).U16(4).U32(0);
  const std::vector<uint8_t>& full = wire.bytes();
  ASSERT_TRUE(ParseDnsQuery(full).ok());
  for (size_t length = 0; length < full.size(); ++length) {
    EXPECT_FALSE(ParseDnsQuery(absl::MakeConstSpan(full.data(), length)).ok())
        << "prefix of " << length << " bytes";
  }
}

TEST(DnsMessageTest, EveryTruncationOfAResponseIsRefused) {
  DnsQuery query;
  query.question = {"example.com", kDnsTypeAaaa, kDnsClassIn};
  const std::vector<uint8_t> full = BuildDnsResponse(query, kDnsNoError, {V6Loopback()}, 1);
  ASSERT_TRUE(ParseDnsResponse(full).ok());
  for (size_t length = 0; length < full.size(); ++length) {
    EXPECT_FALSE(ParseDnsResponse(absl::MakeConstSpan(full.data(), length)).ok())
        << "prefix of " << length << " bytes";
  }
}

TEST(DnsMessageTest, QueryHeaderRules) {
  struct Case {
    const char* what;
    uint16_t flags, qd, an, ns, ar;
  };
  for (const Case& c : {
           Case{"a response", 0x8100, 1, 0, 0, 0},
           Case{"opcode STATUS", 0x1100, 1, 0, 0, 0},
           Case{"no question", kQuery, 0, 0, 0, 0},
           Case{"two questions counted", kQuery, 2, 0, 0, 0},
           Case{"an answer counted", kQuery, 1, 1, 0, 0},
           Case{"an authority record counted", kQuery, 1, 0, 1, 0},
           Case{"an additional record counted but absent", kQuery, 1, 0, 0, 1},
       }) {
    Wire wire;
    wire.Header(1, c.flags, c.qd, c.an, c.ns, c.ar).Question("example.com", kDnsTypeA);
    EXPECT_FALSE(ParseDnsQuery(wire.bytes()).ok()) << c.what;
  }
}

TEST(DnsMessageTest, LabelAndNameLengths) {
  const std::string l63(63, 'a');
  const std::string l64(64, 'a');
  auto query_for = [](absl::string_view name) {
    Wire wire;
    wire.Header(1, kQuery, 1, 0, 0, 0).Question(name, kDnsTypeA);
    return ParseDnsQuery(wire.bytes());
  };
  EXPECT_TRUE(query_for(l63 + ".com").ok());
  absl::StatusOr<DnsQuery> too_long_label = query_for(l64 + ".com");
  EXPECT_FALSE(too_long_label.ok());  // 64 = 0x40: a reserved label type
  // 3 x (1 + 63) + (1 + 61) + 1 = 255 bytes on the wire: the longest name there is.
  const std::string longest = l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b');
  absl::StatusOr<DnsQuery> ok = query_for(longest);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->question.name, longest);
  absl::StatusOr<DnsQuery> too_long = query_for(longest + "b");
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(too_long.status().message(), HasSubstr("255"));
}

TEST(DnsMessageTest, LabelWithADotIsRefused) {
  Wire wire;
  wire.Header(1, kQuery, 1, 0, 0, 0).U8(7);
  for (char c : std::string("a.b.com")) wire.U8(c);
  wire.U8(0).U16(kDnsTypeA).U16(kDnsClassIn);
  EXPECT_FALSE(ParseDnsQuery(wire.bytes()).ok());
}

TEST(DnsMessageTest, ReservedLabelTypeIsRefused) {
  Wire wire;
  wire.Header(1, kQuery, 1, 0, 0, 0).U8(0x41).U8('x').U8(0).U16(kDnsTypeA).U16(kDnsClassIn);
  EXPECT_FALSE(ParseDnsQuery(wire.bytes()).ok());
}

TEST(DnsMessageTest, CompressionPointerToItselfIsRefused) {
  Wire wire;
  wire.Header(1, kQuery, 1, 0, 0, 0).Pointer(12).U16(kDnsTypeA).U16(kDnsClassIn);
  absl::StatusOr<DnsQuery> query = ParseDnsQuery(wire.bytes());
  ASSERT_FALSE(query.ok());
  EXPECT_THAT(query.status().message(), HasSubstr("pointer"));
}

TEST(DnsMessageTest, CompressionPointerIntoTheHeaderIsRefused) {
  Wire wire;
  wire.Header(1, kQuery, 1, 0, 0, 0).Pointer(2).U16(kDnsTypeA).U16(kDnsClassIn);
  EXPECT_FALSE(ParseDnsQuery(wire.bytes()).ok());
}

TEST(DnsMessageTest, ForwardPointerIsRefused) {
  // Question name points forward at an answer's name: forward pointers could form loops.
  Wire wire;
  wire.Header(1, kResponse, 1, 1, 0, 0).Pointer(18).U16(kDnsTypeA).U16(kDnsClassIn);
  wire.Name("example.com").A(5, 1, 2, 3, 4);
  EXPECT_FALSE(ParseDnsResponse(wire.bytes()).ok());
}

TEST(DnsMessageTest, TwoPointerLoopIsRefused) {
  // answer 1's name points at answer 2's, which points back: the second pointer is forward.
  Wire wire;
  wire.Header(1, kResponse, 1, 2, 0, 0).Question("example.com", kDnsTypeA);
  const size_t first = wire.size();
  wire.Pointer(static_cast<uint16_t>(first + 16)).A(5, 1, 2, 3, 4);
  wire.Pointer(static_cast<uint16_t>(first)).A(5, 1, 2, 3, 5);
  EXPECT_FALSE(ParseDnsResponse(wire.bytes()).ok());
}

TEST(DnsMessageTest, LongPointerChainsAreCut) {
  // Each answer's owner points at the previous answer's owner: answer k needs k jumps.
  auto response_with = [](int answers) {
    Wire wire;
    wire.Header(1, kResponse, 1, static_cast<uint16_t>(answers), 0, 0)
        .Question("example.com", kDnsTypeA);
    size_t previous = 12;
    for (int i = 0; i < answers; ++i) {
      const size_t here = wire.size();
      wire.Pointer(static_cast<uint16_t>(previous)).A(5, 192, 0, 2, static_cast<uint8_t>(i));
      previous = here;
    }
    return ParseDnsResponse(wire.bytes());
  };
  absl::StatusOr<DnsResponse> ok = response_with(16);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->addresses.size(), 16u);
  absl::StatusOr<DnsResponse> too_many = response_with(17);
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.status().message(), HasSubstr("too many compression pointers"));
}

TEST(DnsMessageTest, CnameChainIsFollowed) {
  // Out of order on purpose, mixed case, compressed targets.
  Wire good;
  good.Header(77, kResponse, 1, 5, 0, 0).Question("www.example.com", kDnsTypeA);
  // 1: www.example.com CNAME alias.example.net
  good.Pointer(12).RecordTail(kDnsTypeCname, 300, 19).Name("alias.example.net");
  const size_t alias = good.size() - 19;
  // 2: unrelated.test A 192.0.2.99 (not on the chain: ignored)
  good.Name("unrelated.test").A(1, 192, 0, 2, 99);
  // 3: EDGE.cdn.test A 192.0.2.7 (reached below; mixed case)
  const size_t edge = good.size();
  good.Name("EDGE.cdn.test").A(100, 192, 0, 2, 7);
  // 4: alias.example.net CNAME edge.cdn.test, compressed as a pointer to record 3's owner
  good.Pointer(static_cast<uint16_t>(alias))
      .RecordTail(kDnsTypeCname, 300, 2)
      .Pointer(static_cast<uint16_t>(edge));
  // 5: edge.cdn.test A 192.0.2.8
  good.Pointer(static_cast<uint16_t>(edge)).A(50, 192, 0, 2, 8);
  absl::StatusOr<DnsResponse> response = ParseDnsResponse(good.bytes());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->addresses, ElementsAre(V4(192, 0, 2, 7), V4(192, 0, 2, 8)));
  EXPECT_EQ(response->min_ttl, 50u);
}

TEST(DnsMessageTest, CnameLoopEndsWithoutAddresses) {
  Wire wire = ResponseForATest(3);
  wire.Name("a.test").RecordTail(kDnsTypeCname, 5, 8).Name("b.test");
  wire.Name("b.test").RecordTail(kDnsTypeCname, 5, 8).Name("a.test");
  wire.Name("c.test").A(5, 192, 0, 2, 1);
  absl::StatusOr<DnsResponse> response = ParseDnsResponse(wire.bytes());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->addresses, IsEmpty());
}

TEST(DnsMessageTest, CnameTargetOverrunningItsRecordIsRefused) {
  Wire wire = ResponseForATest(1);
  wire.Name("a.test").RecordTail(kDnsTypeCname, 5, 3).Name("b.test");  // says 3, writes 8
  EXPECT_FALSE(ParseDnsResponse(wire.bytes()).ok());
}

TEST(DnsMessageTest, AddressRecordsOfTheWrongSizeAreRefused) {
  Wire wire = ResponseForATest(1);
  wire.Name("a.test").RecordTail(kDnsTypeA, 5, 5).U32(0).U8(0);
  EXPECT_FALSE(ParseDnsResponse(wire.bytes()).ok());
  Wire six;
  six.Header(1, kResponse, 1, 1, 0, 0).Question("a.test", kDnsTypeAaaa);
  six.Name("a.test").RecordTail(kDnsTypeAaaa, 5, 4).U32(0);
  EXPECT_FALSE(ParseDnsResponse(six.bytes()).ok());
}

TEST(DnsMessageTest, RecordDataPastTheEndIsRefused) {
  Wire wire = ResponseForATest(1);
  wire.Name("a.test").RecordTail(16, 5, 200).U32(0);  // TXT claiming 200 bytes, 4 present
  EXPECT_FALSE(ParseDnsResponse(wire.bytes()).ok());
}

TEST(DnsMessageTest, AnswerCountLargerThanTheRecordsIsRefused) {
  Wire wire = ResponseForATest(2);
  wire.Name("a.test").A(5, 192, 0, 2, 1);
  EXPECT_FALSE(ParseDnsResponse(wire.bytes()).ok());
}

TEST(DnsMessageTest, TruncatedResponseIsReportedWithoutItsRecords) {
  Wire wire;
  wire.Header(3, kResponse | 0x0200, 1, 4, 0, 0).Question("big.test", kDnsTypeA);
  wire.Name("big.test").A(5, 192, 0, 2, 1).U8(3);  // then cut mid-record
  absl::StatusOr<DnsResponse> response = ParseDnsResponse(wire.bytes());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_TRUE(response->truncated);
  EXPECT_EQ(response->question.name, "big.test");
  EXPECT_THAT(response->addresses, IsEmpty());
}

TEST(DnsMessageTest, ResponseRules) {
  Wire query;
  query.Header(1, kQuery, 1, 0, 0, 0).Question("a.test", kDnsTypeA);
  EXPECT_FALSE(ParseDnsResponse(query.bytes()).ok());  // QR not set
  Wire no_question;
  no_question.Header(1, kResponse | kDnsServFail, 0, 0, 0, 0);
  EXPECT_FALSE(ParseDnsResponse(no_question.bytes()).ok());
}

TEST(DnsMessageTest, TtlWithTheTopBitSetCountsAsZero) {
  Wire wire = ResponseForATest(1);
  wire.Name("a.test").A(0x80000000, 192, 0, 2, 1);
  absl::StatusOr<DnsResponse> response = ParseDnsResponse(wire.bytes());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->min_ttl, 0u);
}

TEST(DnsMessageTest, OtherClassesAreIgnoredInAnswers) {
  Wire wire = ResponseForATest(1);
  wire.Name("a.test").U16(kDnsTypeA).U16(3).U32(5).U16(4).U32(0x7F000001);  // CHAOS
  absl::StatusOr<DnsResponse> response = ParseDnsResponse(wire.bytes());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->addresses, IsEmpty());
}

// Random corruptions of valid messages: the parsers must not read out of bounds (run under ASan
// to see it) and what they accept must still obey the name rules.
TEST(DnsMessageTest, RandomCorruptionsKeepTheInvariants) {
  Wire wire;
  wire.Header(77, kResponse, 1, 3, 0, 0).Question("www.example.com", kDnsTypeA);
  wire.Pointer(12).RecordTail(kDnsTypeCname, 300, 6).Labels("cdn").Pointer(16);
  wire.Name("cdn.example.com").A(50, 192, 0, 2, 8);
  wire.Pointer(12).A(50, 192, 0, 2, 9);
  const std::vector<uint8_t> response = wire.bytes();
  const std::vector<uint8_t> query = BuildDnsQuery(1, "www.example.com", kDnsTypeA);
  ASSERT_TRUE(ParseDnsResponse(response).ok());
  std::mt19937 random(1234);
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> message = round % 2 ? response : query;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < flips; ++i) {
      message[random() % message.size()] = static_cast<uint8_t>(random());
    }
    if (random() % 4 == 0) message.resize(random() % message.size());
    if (absl::StatusOr<DnsResponse> parsed = ParseDnsResponse(message); parsed.ok()) {
      ++accepted;
      EXPECT_LE(parsed->question.name.size(), 253u);
    }
    if (absl::StatusOr<DnsQuery> parsed = ParseDnsQuery(message); parsed.ok()) {
      EXPECT_LE(parsed->question.name.size(), 253u);
      EXPECT_EQ(parsed->question.name.find(".."), std::string::npos);
    }
  }
  EXPECT_GT(accepted, 0);  // the corruptions are not all fatal, so both paths were exercised
}

}  // namespace
}  // namespace moat::egress
