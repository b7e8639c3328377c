// Output cleaning: what untrusted code printed becomes text that is safe to show a person or a
// model. The raw stream is never what a model sees (docs: DESIGN.md, "Output").
//
// SanitizeOutput, in order:
//   1. cap      keep at most `max_bytes` raw bytes (the collector may already have cut more);
//   2. binary   if fewer than `min_printable_ratio` of the raw bytes are printable (see
//               PrintableRatio), the whole stream becomes "[moat: N bytes of binary output
//               omitted]";
//   3. clean    remove escape and control sequences, NUL, C0/C1 controls and DEL; keep \n and \t;
//               \r\n and a lone \r become \n; invalid UTF-8 becomes U+FFFD (the result is always
//               valid UTF-8, it goes into JSON);
//   4. mask     replace secrets with "[REDACTED:<kind>]" (secret_scanner.h); when the stream was
//               cut, a secret-looking token cut at the end is masked too;
//   5. re-cap   cleaning (U+FFFD is 3 bytes) and masking can grow the text: cut it again to
//               `max_bytes` on a UTF-8 boundary, never inside a "[REDACTED:...]" marker.
//
// TerminalFilter is step 3 alone, as a state machine that runs over chunks as they arrive, for
// live output to a terminal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace moat::sandbox {

struct SanitizeOptions {
  size_t max_bytes = 1 << 20;
  double min_printable_ratio = 0.6;
  bool mask_secrets = true;
};

struct SanitizedText {
  std::string text;
  bool truncated = false;       // input was cut (by the collector or here)
  bool binary_omitted = false;  // replaced by the placeholder
  int secrets_masked = 0;
  std::vector<std::string> secret_kinds;  // distinct kinds masked, sorted, e.g. "aws_access_key"
};

// Keeps at most `cap` bytes of a stream and counts every byte appended.
class BoundedBuffer {
 public:
  explicit BoundedBuffer(size_t cap) : cap_(cap) {}

  void Append(absl::string_view chunk);
  const std::string& data() const { return data_; }
  uint64_t total_bytes() const { return total_; }
  bool overflowed() const { return total_ > cap_; }

 private:
  size_t cap_;
  uint64_t total_ = 0;
  std::string data_;
};

// Cleans one captured stream (stdout or stderr). `truncated_by_collector` says that `raw` is only
// the start of what the program wrote (BoundedBuffer::overflowed()).
SanitizedText SanitizeOutput(absl::string_view raw, bool truncated_by_collector,
                             const SanitizeOptions& options = {});

// The share of `raw` bytes that are printable, in [0, 1]; 1 for empty input. It is measured on
// the raw bytes, weighted by bytes, so that binary garbage is caught before cleaning hides it:
// a byte is printable when it belongs to a well-formed UTF-8 sequence whose code point is not a
// control, or is one of \t \n \r. Controls are C0 (U+0000..U+001F), DEL (U+007F) and C1
// (U+0080..U+009F). Bytes of invalid UTF-8 are not printable. Escape sequences count byte by
// byte: ESC is not printable, "[31m" is.
double PrintableRatio(absl::string_view raw);

// The placeholder that replaces binary output of `bytes` bytes; `cut` adds "at least".
std::string BinaryPlaceholder(size_t bytes, bool cut);

// Removes escape and control sequences from a stream given in chunks; the output is the same
// whatever the chunking, so a sequence or a UTF-8 character split over chunks is handled as if it
// had arrived whole. At most 3 bytes (a partial UTF-8 character) are held back between calls.
//
// Recognised (ECMA-48 and what terminals accept):
//   ESC [ params... final           CSI (also 8-bit 0x9B and UTF-8 U+009B)
//   ESC ] ... BEL | ST              OSC (also 0x9D / U+009D)
//   ESC P|X|^|_ ... ST              DCS, SOS, PM, APC strings (also their C1 forms)
//   ESC intermediates... final      2-byte (Fp, Fe, Fs) and nF sequences such as ESC ( B
// where ST is ESC \ or C1 0x9C / U+009C. CAN and SUB abort a sequence, as in terminals. A byte
// that cannot continue a sequence ends it and is then handled as text, so nothing of a broken
// sequence can form a control. A string that is never terminated swallows the rest of the
// stream, as a terminal would.
//
// The state machine over code points (after UTF-8 decoding; a lone byte 0x80..0x9F is taken as
// the C1 control of that value, any other invalid UTF-8 as U+FFFD):
//
//            ESC                    '[' (or C1 CSI)        0x40..0x7E
//   kText ─────────▶ kEsc ──────────────────────────▶ kCsi ───────────▶ kText
//     ▲               │  ']' 'P' 'X' '^' '_'            (0x20..0x3F stay; other: abort, re-handle
//     │               │  (or C1 OSC DCS SOS PM APC)      the code point in kText)
//     │               ├──────────────▶ kString ──BEL(OSC only) / C1 ST / CAN / SUB──▶ kText
//     │               │                  │ ▲
//     │               │              ESC │ │ (anything but '\': re-handle in kEsc)
//     │               │                  ▼ │
//     │               │               kStringEsc ──'\'──▶ kText
//     │               │ 0x20..0x2F
//     │               ├──────────────▶ kEscIntermediate ──0x30..0x7E──▶ kText
//     │               │ 0x30..0x7E
//     └───────────────┘ (2-byte sequence done; any other code point: drop ESC, re-handle)
//
// In kText: \n and \t are kept; \r becomes \n and a \n right after it is dropped (so \r\n is one
// \n, also when the two are split by a removed sequence); other C0, DEL and C1 are dropped.
class TerminalFilter {
 public:
  // Returns the cleaned text that can be emitted now.
  std::string Filter(absl::string_view chunk);
  // At end of stream: emits a pending partial UTF-8 character as U+FFFD, forgets an unfinished
  // sequence, and resets the filter for a new stream.
  std::string Flush();

  // Like Filter and Flush, appending to `out`. `input_was_cut`: the stream was truncated, so a
  // partial character at the end is an artifact of the cut and is dropped instead of replaced.
  void FilterTo(absl::string_view chunk, std::string* out);
  void FlushTo(std::string* out, bool input_was_cut = false);

 private:
  enum class State : uint8_t { kText, kEsc, kEscIntermediate, kCsi, kString, kStringEsc };

  // Handles one decoded code point whose UTF-8 bytes are `bytes` (emitted only if it is text).
  void Step(uint32_t cp, absl::string_view bytes, std::string* out);
  void EmitText(uint32_t cp, absl::string_view bytes, std::string* out);
  // In an ESC intermediate or CSI sequence, which 0x20..first_final-1 continue and
  // first_final..0x7E end: returns whether `cp` is consumed. Any other code point ends the
  // sequence and is handed to the new state, except ESC, which is consumed as a new sequence.
  bool SequenceStep(uint32_t cp, uint32_t first_final);
  // An ill-formed UTF-8 unit of `len` bytes, the first being `first`.
  void StepInvalid(unsigned char first, size_t len, std::string* out);

  State state_ = State::kText;
  bool string_ends_on_bel_ = false;  // the open string is an OSC
  bool cr_pending_ = false;          // last emitted was a \r turned into \n
  // A UTF-8 character split over chunks: bytes seen, bytes still needed, decoded bits so far, and
  // the allowed range of the next byte (narrower than 0x80..0xBF right after some lead bytes).
  unsigned char utf8_buf_[4] = {};
  uint8_t utf8_len_ = 0;
  uint8_t utf8_need_ = 0;
  uint32_t utf8_cp_ = 0;
  unsigned char utf8_lo_ = 0x80;
  unsigned char utf8_hi_ = 0xBF;
};

}  // namespace moat::sandbox
