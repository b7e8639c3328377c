#include "node-agent/api/sse_event.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "sandbox/output/utf8_lead.h"

namespace moat::agent {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Bytes that cannot be copied as they are: control bytes, `"`, `\` and the start of non-ASCII.
// A table: one load per byte of the plain runs that are most of any output.
constexpr std::array<bool, 256> kNeedsCare = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = c < 0x20 || c == '"' || c == '\\' || c >= 0x80;
  return t;
}();

void AppendEscapedControl(unsigned char c, std::string* out) {
  // 0x08..0x0D have short escapes (\b \t \n \f \r), except 0x0B (\v), which JSON lacks.
  constexpr char kShort[] = "btn_fr";
  if (c >= 0x08 && c <= 0x0D && c != 0x0B) {
    const char escape[] = {'\\', kShort[c - 0x08]};
    out->append(escape, sizeof(escape));
    return;
  }
  constexpr char kHex[] = "0123456789abcdef";  // nlohmann's "\\u%04x": lower case.
  const char escape[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
  out->append(escape, sizeof(escape));
}

}  // namespace

void AppendJsonString(absl::string_view text, std::string* out) {
  out->reserve(out->size() + text.size() + 2);
  out->push_back('"');
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t run = i;
    while (run < n && !kNeedsCare[static_cast<unsigned char>(text[run])]) ++run;
    out->append(text.data() + i, run - i);
    i = run;
    if (i == n) break;
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out->push_back('\\');
        out->push_back(static_cast<char>(c));
      } else {
        AppendEscapedControl(c, out);
      }
      ++i;
      continue;
    }
    const sandbox::Utf8Lead lead = sandbox::ClassifyUtf8Lead(c);
    if (lead.len == 0) {
      // Rejected at its first byte: nlohmann drops that byte for one U+FFFD.
      out->append(kReplacement);
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool whole = true;
    for (int k = 1; k < lead.len; ++k, ++j) {
      if (j == n) {
        // Cut short by the end of the string: one U+FFFD for what was begun.
        out->append(kReplacement);
        out->push_back('"');
        return;
      }
      const auto next = static_cast<unsigned char>(text[j]);
      const unsigned char low = k == 1 ? lead.lo : 0x80;
      const unsigned char high = k == 1 ? lead.hi : 0xBF;
      if (next < low || next > high) {
        whole = false;
        break;
      }
    }
    if (whole) {
      out->append(text.data() + i, j - i);
    } else {
      // Rejected inside a sequence: one U+FFFD for the bytes before, and the byte that did not
      // fit is read again as a start (nlohmann's `--i`).
      out->append(kReplacement);
    }
    i = j;
  }
  out->push_back('"');
}

OutputEventWriter::OutputEventWriter(int64_t timestamp_ms)
    : stdout_tail_(absl::StrCat(",\"timestamp\":", timestamp_ms, ",\"type\":\"stdout\"}\n\n")),
      stderr_tail_(absl::StrCat(",\"timestamp\":", timestamp_ms, ",\"type\":\"stderr\"}\n\n")) {}

void OutputEventWriter::Append(OutputStream stream, absl::string_view text, bool partial,
                               std::string* out) const {
  out->append(partial ? "data: {\"partial\":true,\"text\":" : "data: {\"text\":");
  AppendJsonString(text, out);
  out->append(stream == OutputStream::kStdout ? stdout_tail_ : stderr_tail_);
}

std::string SseEvent(const nlohmann::json& event) {
  return absl::StrCat(
      "data: ", event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "\n\n");
}

}  // namespace moat::agent
