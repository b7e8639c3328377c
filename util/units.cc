#include "util/units.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace moat {
namespace {

// At most nanosecond precision for durations, and no more than that for sizes and CPU counts.
constexpr int kMaxFractionDigits = 9;
// Enough for UINT64_MAX (20 digits); the value is range-checked after parsing.
constexpr int kMaxIntegerDigits = 20;

// "123" or "1.25": the digits of a non-negative decimal, split into its integer part and fraction
// (fraction_digits digits worth `fraction`, e.g. "25" -> fraction 25, fraction_digits 2).
struct Decimal {
  uint64_t integer = 0;
  uint64_t fraction = 0;
  int fraction_digits = 0;
};

// Parses exactly `[0-9]+(\.[0-9]+)?` with the digit limits above. No sign, exponent or spaces.
bool ParseDecimal(absl::string_view text, Decimal* out) {
  size_t dot = text.find('.');
  absl::string_view integer = text.substr(0, dot);
  absl::string_view fraction = dot == absl::string_view::npos ? "" : text.substr(dot + 1);
  if (integer.empty() || integer.size() > kMaxIntegerDigits) return false;
  if (dot != absl::string_view::npos && (fraction.empty() || fraction.size() > kMaxFractionDigits))
    return false;
  Decimal d;
  unsigned __int128 value = 0;  // 20 digits may exceed uint64_t before the check below
  for (char c : integer) {
    if (!absl::ascii_isdigit(c)) return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > std::numeric_limits<uint64_t>::max()) return false;
  d.integer = static_cast<uint64_t>(value);
  for (char c : fraction) {
    if (!absl::ascii_isdigit(c)) return false;
    d.fraction = d.fraction * 10 + static_cast<uint64_t>(c - '0');
  }
  d.fraction_digits = static_cast<int>(fraction.size());
  *out = d;
  return true;
}

unsigned __int128 Pow10(int n) {
  unsigned __int128 p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// value * unit exactly, or false if it is not a whole number or does not fit in `max`.
bool ScaleExact(const Decimal& d, uint64_t unit, uint64_t max, uint64_t* out) {
  unsigned __int128 whole = static_cast<unsigned __int128>(d.integer) * unit;
  unsigned __int128 frac = static_cast<unsigned __int128>(d.fraction) * unit;
  unsigned __int128 scale = Pow10(d.fraction_digits);
  if (frac % scale != 0) return false;
  unsigned __int128 total = whole + frac / scale;
  if (total > max) return false;
  *out = static_cast<uint64_t>(total);
  return true;
}

// Splits "64MiB" into "64" and "MiB".
void SplitNumber(absl::string_view text, absl::string_view* number, absl::string_view* unit) {
  size_t end = 0;
  while (end < text.size() && (absl::ascii_isdigit(text[end]) || text[end] == '.')) ++end;
  *number = text.substr(0, end);
  *unit = text.substr(end);
}

// The multiplier of a size suffix: 0 if the suffix is unknown, kDecimalSpelling for "KB", "MB",
// "GB" and "TB" (refused with their own advice).
constexpr uint64_t kDecimalSpelling = ~uint64_t{0};

uint64_t SizeMultiplier(absl::string_view unit) {
  std::string u = absl::AsciiStrToLower(unit);
  if (u.empty() || u == "b") return 1;
  if (u.size() == 2 && u[1] == 'b') return kDecimalSpelling;
  // "kib" -> "k", "ki" -> "k".
  if (u.size() == 3 && u[1] == 'i' && u[2] == 'b') u.resize(1);
  if (u.size() == 2 && u[1] == 'i') u.resize(1);
  if (u.size() != 1) return 0;
  switch (u[0]) {
    case 'k':
      return uint64_t{1} << 10;
    case 'm':
      return uint64_t{1} << 20;
    case 'g':
      return uint64_t{1} << 30;
    case 't':
      return uint64_t{1} << 40;
    default:
      return 0;
  }
}

}  // namespace

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid size ", QuoteForMessage(text), " (use e.g. 512M, 1G)"));
  };
  absl::string_view number, unit;
  SplitNumber(text, &number, &unit);
  Decimal d;
  if (!ParseDecimal(number, &d)) return invalid();
  uint64_t multiplier = SizeMultiplier(unit);
  if (multiplier == 0) return invalid();
  if (multiplier == kDecimalSpelling) {
    const std::string prefix(1, absl::ascii_toupper(unit[0]));
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid size ", QuoteForMessage(text), ": sizes in moat are binary; write ", number,
        prefix, " or ", number, prefix, "iB for multiples of 1024, or the number of bytes"));
  }
  uint64_t bytes = 0;
  if (!ScaleExact(d, multiplier, std::numeric_limits<uint64_t>::max(), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid size ", QuoteForMessage(text),
                     ": not a whole number of bytes or too large (use e.g. 512M, 1G)"));
  }
  return bytes;
}

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat("invalid duration ", QuoteForMessage(text),
                                                   " (use e.g. 500ms, 30s, 1.5s, 2m, 1h)"));
  };
  absl::string_view number, unit;
  SplitNumber(text, &number, &unit);
  Decimal d;
  if (!ParseDecimal(number, &d)) return invalid();
  uint64_t nanos_per_unit = 0;
  if (unit.empty() || unit == "s") {
    nanos_per_unit = 1'000'000'000;
  } else if (unit == "ms") {
    nanos_per_unit = 1'000'000;
  } else if (unit == "m") {
    nanos_per_unit = 60'000'000'000;
  } else if (unit == "h") {
    nanos_per_unit = 3'600'000'000'000;
  } else {
    return invalid();
  }
  uint64_t nanos = 0;
  if (!ScaleExact(d, nanos_per_unit, std::numeric_limits<int64_t>::max(), &nanos)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid duration ", QuoteForMessage(text),
                                                   ": finer than a nanosecond or too long"));
  }
  return absl::Nanoseconds(static_cast<int64_t>(nanos));
}

absl::StatusOr<double> ParseCpus(absl::string_view text) {
  Decimal d;
  double cpus = 0;
  // ParseDecimal checks the shape; SimpleAtod then rounds correctly without locale surprises.
  if (!ParseDecimal(text, &d) || !absl::SimpleAtod(text, &cpus)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid CPU count ", QuoteForMessage(text), " (use e.g. 1, 0.5, 2)"));
  }
  if (!(cpus > 0) || cpus > kMaxCpus) {
    return absl::InvalidArgumentError(absl::StrCat("invalid CPU count ", QuoteForMessage(text),
                                                   ": must be above 0 and at most 1024"));
  }
  return cpus;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr struct {
    int shift;
    char suffix;
  } kUnits[] = {{40, 'T'}, {30, 'G'}, {20, 'M'}, {10, 'K'}};
  if (bytes == 0) return "0";
  for (const auto& unit : kUnits) {
    uint64_t size = uint64_t{1} << unit.shift;
    if (bytes % size == 0) return absl::StrCat(bytes / size, std::string(1, unit.suffix));
  }
  return absl::StrCat(bytes);
}

}  // namespace moat
