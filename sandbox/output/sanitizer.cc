#include "sandbox/output/sanitizer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sandbox/output/secret_scanner.h"
#include "sandbox/output/utf8_lead.h"

namespace moat::sandbox {
namespace {

constexpr uint32_t kEscape = 0x1B;
constexpr uint32_t kBell = 0x07;
constexpr uint32_t kCancel = 0x18;      // CAN: aborts a sequence
constexpr uint32_t kSubstitute = 0x1A;  // SUB: aborts a sequence
constexpr uint32_t kDelete = 0x7F;
// C1 controls that open a sequence or a string (ECMA-48 8.3).
constexpr uint32_t kC1Dcs = 0x90;
constexpr uint32_t kC1Sos = 0x98;
constexpr uint32_t kC1Csi = 0x9B;
constexpr uint32_t kC1St = 0x9C;
constexpr uint32_t kC1Osc = 0x9D;
constexpr uint32_t kC1Pm = 0x9E;
constexpr uint32_t kC1Apc = 0x9F;
constexpr uint32_t kReplacementChar = 0xFFFD;
constexpr absl::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Printable ASCII that needs no decision at all: the fast path of the filter copies runs of it.
constexpr std::array<bool, 256> kPlainAscii = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x7F; ++c) t[c] = true;
  return t;
}();

// Printable for PrintableRatio: plain ASCII plus \t \n \r.
constexpr std::array<uint8_t, 256> kPrintableAsciiCount = [] {
  std::array<uint8_t, 256> t{};
  for (int c = 0x20; c < 0x7F; ++c) t[c] = 1;
  t['\t'] = t['\n'] = t['\r'] = 1;
  return t;
}();

inline bool InRange(uint32_t cp, uint32_t lo, uint32_t hi) { return cp >= lo && cp <= hi; }

// Cuts `text` to at most `cap` bytes on a UTF-8 boundary, and not inside a "[REDACTED:...]"
// marker: half a marker would look like a broken secret to a reader.
void CutToCap(std::string* text, size_t cap) {
  if (text->size() <= cap) return;
  size_t pos = cap;
  while (pos > 0 && (static_cast<unsigned char>((*text)[pos]) & 0xC0) == 0x80) --pos;
  constexpr absl::string_view kMarker = "[REDACTED:";
  constexpr size_t kLongestMarker = 32;  // "[REDACTED:" + the longest kind name + "]" is 25
  const size_t window = pos > kLongestMarker ? pos - kLongestMarker : 0;
  for (size_t m = pos; m-- > window;) {
    if ((*text)[m] == ']') break;  // the last marker before the cut is whole
    if ((*text)[m] == '[' &&
        absl::string_view(*text).substr(m).substr(0, kMarker.size()) == kMarker) {
      pos = m;
      break;
    }
  }
  text->resize(pos);
}

}  // namespace

void BoundedBuffer::Append(absl::string_view chunk) {
  total_ += chunk.size();
  if (data_.size() < cap_) {
    data_.append(chunk.data(), std::min(chunk.size(), cap_ - data_.size()));
  }
}

double PrintableRatio(absl::string_view raw) {
  if (raw.empty()) return 1.0;
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  const size_t n = raw.size();
  size_t printable = 0;
  size_t i = 0;
  while (i < n) {
    while (i < n && p[i] < 0x80) printable += kPrintableAsciiCount[p[i++]];
    if (i == n) break;
    const Utf8Lead lead = ClassifyUtf8Lead(p[i]);
    bool ok = lead.len > 0 && i + lead.len <= n && p[i + 1] >= lead.lo && p[i + 1] <= lead.hi;
    for (size_t k = 2; ok && k < lead.len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (!ok) {  // one byte of ill-formed UTF-8: not printable; look at the next byte afresh
      ++i;
      continue;
    }
    const bool c1_control = p[i] == 0xC2 && p[i + 1] < 0xA0;  // U+0080..U+009F
    if (!c1_control) printable += lead.len;
    i += lead.len;
  }
  return static_cast<double>(printable) / static_cast<double>(n);
}

std::string BinaryPlaceholder(size_t bytes, bool cut) {
  return absl::StrCat("[moat: ", cut ? "at least " : "", bytes, " bytes of binary output omitted]");
}

SanitizedText SanitizeOutput(absl::string_view raw, bool truncated_by_collector,
                             const SanitizeOptions& options) {
  SanitizedText result;
  const size_t cap = options.max_bytes;
  result.truncated = truncated_by_collector || raw.size() > cap;
  if (raw.size() > cap) raw = raw.substr(0, cap);

  if (PrintableRatio(raw) < options.min_printable_ratio) {
    result.binary_omitted = true;
    result.text = BinaryPlaceholder(raw.size(), result.truncated);
  } else {
    std::string cleaned;
    cleaned.reserve(raw.size());
    TerminalFilter filter;
    filter.FilterTo(raw, &cleaned);
    filter.FlushTo(&cleaned, /*input_was_cut=*/result.truncated);
    if (options.mask_secrets) {
      MaskedText masked = MaskSecrets(cleaned, /*text_was_cut=*/result.truncated);
      result.text = std::move(masked.text);
      result.secrets_masked = masked.secrets_masked;
      result.secret_kinds = std::move(masked.kinds);
    } else {
      result.text = std::move(cleaned);
    }
  }

  if (result.text.size() > cap) {
    CutToCap(&result.text, cap);
    result.truncated = true;
  }
  return result;
}

std::string TerminalFilter::Filter(absl::string_view chunk) {
  std::string out;
  out.reserve(chunk.size());
  FilterTo(chunk, &out);
  return out;
}

std::string TerminalFilter::Flush() {
  std::string out;
  FlushTo(&out);
  return out;
}

void TerminalFilter::FilterTo(absl::string_view chunk, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(chunk.data());
  const auto* const end = p + chunk.size();
  auto view = [](const unsigned char* s, size_t len) {
    return absl::string_view(reinterpret_cast<const char*>(s), len);
  };

  // Finish a character that an earlier chunk began.
  while (utf8_need_ > 0 && p < end) {
    const unsigned char b = *p;
    if (b < utf8_lo_ || b > utf8_hi_) {
      const size_t len = utf8_len_;
      utf8_need_ = utf8_len_ = 0;
      StepInvalid(utf8_buf_[0], len, out);
      break;  // `b` starts something new; the loop below handles it
    }
    utf8_buf_[utf8_len_++] = b;
    utf8_cp_ = (utf8_cp_ << 6) | (b & 0x3Fu);
    utf8_lo_ = 0x80;
    utf8_hi_ = 0xBF;
    ++p;
    if (--utf8_need_ == 0) {
      const size_t len = utf8_len_;
      utf8_len_ = 0;
      Step(utf8_cp_, view(utf8_buf_, len), out);
    }
  }

  while (p < end) {
    if (state_ == State::kText) {  // fast path: copy a run of plain ASCII in one go
      const unsigned char* run = p;
      while (p < end && kPlainAscii[*p]) ++p;
      if (p != run) {
        out->append(reinterpret_cast<const char*>(run), p - run);
        cr_pending_ = false;
        if (p == end) break;
      }
    }
    const unsigned char b = *p;
    if (b < 0x80) {
      Step(b, view(p, 1), out);
      ++p;
      continue;
    }
    const Utf8Lead lead = ClassifyUtf8Lead(b);
    if (lead.len == 0) {
      StepInvalid(b, 1, out);
      ++p;
      continue;
    }
    uint32_t cp = lead.bits;
    unsigned char lo = lead.lo;
    unsigned char hi = lead.hi;
    size_t k = 1;
    for (; k < lead.len && p + k < end; ++k) {
      const unsigned char c = p[k];
      if (c < lo || c > hi) break;
      cp = (cp << 6) | (c & 0x3Fu);
      lo = 0x80;
      hi = 0xBF;
    }
    if (k == lead.len) {
      if (state_ == State::kText && cp >= 0xA0) {  // fast path: a non-control character
        out->append(reinterpret_cast<const char*>(p), k);
        cr_pending_ = false;
      } else {
        Step(cp, view(p, k), out);
      }
      p += k;
    } else if (p + k < end) {  // ill-formed: the maximal valid prefix is one U+FFFD
      StepInvalid(b, k, out);
      p += k;
    } else {  // the chunk ends inside the character: keep its start for the next chunk
      std::memcpy(utf8_buf_, p, k);
      utf8_len_ = static_cast<uint8_t>(k);
      utf8_need_ = static_cast<uint8_t>(lead.len - k);
      utf8_cp_ = cp;
      utf8_lo_ = lo;
      utf8_hi_ = hi;
      p = end;
    }
  }
}

void TerminalFilter::FlushTo(std::string* out, bool input_was_cut) {
  if (utf8_len_ > 0 && !input_was_cut) StepInvalid(utf8_buf_[0], utf8_len_, out);
  *this = TerminalFilter();
}

void TerminalFilter::StepInvalid(unsigned char first, size_t len, std::string* out) {
  // A stray byte 0x80..0x9F is the 8-bit form of a C1 control (for example 0x9B is CSI): treat it
  // as that control so its sequence is removed, not shown as U+FFFD followed by "31m".
  if (len == 1 && first >= 0x80 && first <= 0x9F) {
    Step(first, {}, out);
  } else {
    Step(kReplacementChar, kReplacementUtf8, out);
  }
}

bool TerminalFilter::SequenceStep(uint32_t cp, uint32_t first_final) {
  if (InRange(cp, 0x20, first_final - 1)) return true;  // parameter and intermediate bytes
  if (InRange(cp, first_final, 0x7E)) {                 // final byte
    state_ = State::kText;
    return true;
  }
  state_ = cp == kEscape ? State::kEsc : State::kText;
  return cp == kEscape;
}

void TerminalFilter::Step(uint32_t cp, absl::string_view bytes, std::string* out) {
  // Each case either consumes `cp` (return) or ends the sequence and hands `cp` to the new state
  // (continue), so a code point that cannot belong to a sequence is never lost or half-used.
  for (;;) {
    switch (state_) {
      case State::kText:
        EmitText(cp, bytes, out);
        return;
      case State::kEsc:
        if (cp == '[') {
          state_ = State::kCsi;
        } else if (cp == ']') {
          state_ = State::kString;
          string_ends_on_bel_ = true;
        } else if (cp == 'P' || cp == 'X' || cp == '^' || cp == '_') {
          state_ = State::kString;
          string_ends_on_bel_ = false;
        } else if (InRange(cp, 0x20, 0x2F)) {
          state_ = State::kEscIntermediate;
        } else if (InRange(cp, 0x30, 0x7E)) {
          state_ = State::kText;     // a complete 2-byte sequence
        } else if (cp != kEscape) {  // ESC ESC: the second one starts afresh
          state_ = State::kText;
          continue;
        }
        return;
      case State::kEscIntermediate:
        if (SequenceStep(cp, /*first_final=*/0x30)) return;
        continue;
      case State::kCsi:
        if (SequenceStep(cp, /*first_final=*/0x40)) return;
        continue;
      case State::kString:
        if (cp == kEscape) {
          state_ = State::kStringEsc;
        } else if (cp == kC1St || cp == kCancel || cp == kSubstitute ||
                   (cp == kBell && string_ends_on_bel_)) {
          state_ = State::kText;
        }
        return;
      case State::kStringEsc:
        if (cp == '\\') {  // ESC \ is ST
          state_ = State::kText;
          return;
        }
        state_ = State::kEsc;  // an ESC ends the string and starts a new sequence
        continue;
    }
  }
}

void TerminalFilter::EmitText(uint32_t cp, absl::string_view bytes, std::string* out) {
  switch (cp) {
    case '\n':
      if (!cr_pending_) out->push_back('\n');
      cr_pending_ = false;
      return;
    case '\r':
      out->push_back('\n');
      cr_pending_ = true;
      return;
    case '\t':
      out->push_back('\t');
      cr_pending_ = false;
      return;
    case kEscape:
      state_ = State::kEsc;
      return;
    case kC1Csi:
      state_ = State::kCsi;
      return;
    case kC1Osc:
      state_ = State::kString;
      string_ends_on_bel_ = true;
      return;
    case kC1Dcs:
    case kC1Sos:
    case kC1Pm:
    case kC1Apc:
      state_ = State::kString;
      string_ends_on_bel_ = false;
      return;
    default:
      break;
  }
  // Every other control is dropped without a trace: C0 (incl. NUL, BEL, BS), DEL and C1.
  if (cp < 0x20 || cp == kDelete || InRange(cp, 0x80, 0x9F)) return;
  out->append(bytes.data(), bytes.size());
  cr_pending_ = false;
}

}  // namespace moat::sandbox
