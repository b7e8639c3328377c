// Parsing and printing of the human units used in policies and flags: sizes ("64M"), durations
// ("500ms") and CPU counts ("0.5"). Parsers are strict: no signs, no spaces, no exponents, and
// any text they do not fully understand is an error rather than a guess.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "util/quote.h"  // QuoteForMessage, for the callers that found it here

namespace moat {

// Bytes, optionally with a binary suffix: K, M, G or T (case-insensitive), or the same followed
// by "i" or "iB": "512", "64M", "64Mi", "64MiB", "1.5G". Every size in moat is binary: "64M" is
// 64 MiB (67108864) in policies, flags, the agent's and the controller's configs alike. "64MB"
// (which elsewhere often means 64 000 000) is an error that says to write 64M or a number of
// bytes. A fraction is allowed only if the result is a whole number of bytes. Zero is accepted;
// callers check ranges.
absl::StatusOr<uint64_t> ParseSize(absl::string_view text);

// A decimal number with an optional unit: "ms", "s", "m" or "h"; a bare number means seconds:
// "500ms", "2s", "1m", "1h", "1.5s", "30". At most nanosecond precision; negative or overflowing
// values are errors. Zero is accepted; callers check ranges.
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text);

// A decimal CPU count in (0, 1024]: "1", "0.5", "2.25".
absl::StatusOr<double> ParseCpus(absl::string_view text);

// The shortest exact form ParseSize reads back: 67108864 -> "64M", 1536 -> "1536", 0 -> "0".
std::string FormatSize(uint64_t bytes);

inline constexpr double kMaxCpus = 1024.0;

}  // namespace moat
