#include "util/units.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat {
namespace {

using ::testing::HasSubstr;

TEST(ParseSizeTest, AcceptsBytesAndBinarySuffixes) {
  struct Case {
    absl::string_view text;
    uint64_t bytes;
  } cases[] = {
      {"0", 0},
      {"512", 512},
      {"512B", 512},
      {"1K", 1024},
      {"1k", 1024},
      {"64M", 64ull << 20},
      {"64MiB", 64ull << 20},
      {"64Mi", 64ull << 20},
      {"64mib", 64ull << 20},
      {"1G", 1ull << 30},
      {"2T", 2ull << 40},
      {"1.5G", 3ull << 29},
      {"0.5K", 512},
      {"1000.0", 1000},
      {"16777215T", 16777215ull << 40},  // 2^64 - 2^40: the largest whole T count that fits
      {"18446744073709551615", UINT64_MAX},
  };
  for (const auto& c : cases) {
    auto size = ParseSize(c.text);
    ASSERT_TRUE(size.ok()) << c.text << ": " << size.status();
    EXPECT_EQ(*size, c.bytes) << c.text;
  }
}

TEST(ParseSizeTest, RejectsMalformedText) {
  for (absl::string_view text : std::initializer_list<absl::string_view>{
           "",    "M",   "12Q",   "-1",    "+1",  " 1M",   "1M ",
           "1 M", "1.M", ".5M",   "1..5M", "1e3", "0x10",  "1MM",
           "1iB", "1Bi", "1KiBB", "inf",   "nan", "1,000", absl::string_view("1\0M", 3)}) {
    auto size = ParseSize(text);
    ASSERT_FALSE(size.ok()) << text;
    EXPECT_THAT(size.status().message(), HasSubstr("invalid size")) << text;
  }
}

// "64MB" means 64 000 000 in some tools and 64 MiB in others: moat reads neither and says what to
// write instead.
TEST(ParseSizeTest, RefusesDecimalLookingSuffixesWithAdvice) {
  for (absl::string_view text : {"64MB", "64mb", "2KB", "1GB", "3TB"}) {
    auto size = ParseSize(text);
    ASSERT_FALSE(size.ok()) << text;
    EXPECT_THAT(size.status().message(), HasSubstr("sizes in moat are binary")) << text;
  }
  EXPECT_EQ(ParseSize("64MB").status().message(),
            "invalid size \"64MB\": sizes in moat are binary; write 64M or 64MiB for multiples of "
            "1024, or the number of bytes");
}

TEST(ParseSizeTest, ErrorMessageMatchesTheDocumentedFormat) {
  EXPECT_EQ(ParseSize("12Q").status().message(), "invalid size \"12Q\" (use e.g. 512M, 1G)");
}

TEST(ParseSizeTest, RejectsFractionalBytesAndOverflow) {
  EXPECT_FALSE(ParseSize("1.5").ok());
  EXPECT_FALSE(ParseSize("0.0001K").ok());               // 0.1024 bytes
  EXPECT_FALSE(ParseSize("16777215.9999999T").ok());     // fraction makes it not a whole byte count
  EXPECT_FALSE(ParseSize("16777216T").ok());             // 2^64: overflows
  EXPECT_FALSE(ParseSize("18446744073709551616").ok());  // UINT64_MAX + 1
  EXPECT_FALSE(ParseSize("99999999999999999999").ok());
  EXPECT_FALSE(ParseSize("100000000000000000000").ok());  // 21 digits
}

TEST(ParseDurationTest, AcceptsUnitsAndBareSeconds) {
  struct Case {
    absl::string_view text;
    absl::Duration duration;
  } cases[] = {
      {"0", absl::ZeroDuration()},
      {"30", absl::Seconds(30)},
      {"1.5", absl::Milliseconds(1500)},
      {"500ms", absl::Milliseconds(500)},
      {"2s", absl::Seconds(2)},
      {"1.5s", absl::Milliseconds(1500)},
      {"1m", absl::Minutes(1)},
      {"1.5m", absl::Seconds(90)},
      {"1h", absl::Hours(1)},
      {"0.001s", absl::Milliseconds(1)},
      {"0.5ms", absl::Microseconds(500)},
      {"0.000000001", absl::Nanoseconds(1)},
  };
  for (const auto& c : cases) {
    auto duration = ParseDuration(c.text);
    ASSERT_TRUE(duration.ok()) << c.text << ": " << duration.status();
    EXPECT_EQ(*duration, c.duration) << c.text;
  }
}

TEST(ParseDurationTest, RejectsMalformedText) {
  for (absl::string_view text : {"", "s", "-1s", "+1s", "1 s", "1S", "1sec", "1d", "1us", "1ns",
                                 "1m30s", "inf", "1e3", ".5s", "5.s", "1,5s"}) {
    auto duration = ParseDuration(text);
    ASSERT_FALSE(duration.ok()) << text;
    EXPECT_THAT(duration.status().message(), HasSubstr("invalid duration")) << text;
  }
}

TEST(ParseDurationTest, RejectsSubNanosecondAndOverflow) {
  EXPECT_FALSE(ParseDuration("0.0000000001").ok());  // 10 fraction digits
  EXPECT_FALSE(ParseDuration("0.0000001ms").ok());   // 0.1ns
  EXPECT_FALSE(ParseDuration("3000000h").ok());      // about 342 years: beyond int64 nanoseconds
  EXPECT_TRUE(ParseDuration("2000000h").ok());       // about 228 years: fits
}

TEST(ParseCpusTest, AcceptsRange) {
  EXPECT_EQ(*ParseCpus("1"), 1.0);
  EXPECT_EQ(*ParseCpus("0.5"), 0.5);
  EXPECT_EQ(*ParseCpus("2.25"), 2.25);
  EXPECT_EQ(*ParseCpus("0.1"), 0.1);
  EXPECT_EQ(*ParseCpus("1024"), 1024.0);
  EXPECT_EQ(*ParseCpus("1024.0"), 1024.0);
}

TEST(ParseCpusTest, RejectsOutOfRangeAndMalformed) {
  for (absl::string_view text : {"0", "0.0", "1024.5", "1025", "-1", "", "1e2", "inf", "nan", "one",
                                 "1.", ".5", " 1", "0x1"}) {
    auto cpus = ParseCpus(text);
    ASSERT_FALSE(cpus.ok()) << text;
    EXPECT_THAT(cpus.status().message(), HasSubstr("invalid CPU count")) << text;
  }
}

TEST(FormatSizeTest, UsesTheLargestExactUnit) {
  EXPECT_EQ(FormatSize(0), "0");
  EXPECT_EQ(FormatSize(1), "1");
  EXPECT_EQ(FormatSize(1536), "1536");
  EXPECT_EQ(FormatSize(1024), "1K");
  EXPECT_EQ(FormatSize(67108864), "64M");
  EXPECT_EQ(FormatSize(3ull << 29), "1536M");
  EXPECT_EQ(FormatSize(1ull << 30), "1G");
  EXPECT_EQ(FormatSize(5ull << 40), "5T");
}

TEST(FormatSizeTest, RoundTripsThroughParseSize) {
  for (uint64_t bytes :
       std::initializer_list<uint64_t>{0ull, 1ull, 1023ull, 1024ull, 1536ull, 64ull << 20,
                                       3ull << 29, (1ull << 40) + 1, UINT64_MAX}) {
    auto parsed = ParseSize(FormatSize(bytes));
    ASSERT_TRUE(parsed.ok()) << FormatSize(bytes) << ": " << parsed.status();
    EXPECT_EQ(*parsed, bytes);
  }
}

}  // namespace
}  // namespace moat
