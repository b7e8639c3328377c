#include "util/quote.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace moat {

std::string QuoteForMessage(absl::string_view text) {
  constexpr size_t kMaxShown = 80;
  if (text.size() > kMaxShown) {
    return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxShown)), "\"...");
  }
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

}  // namespace moat
