#include "util/shell_command.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/quote.h"

namespace moat {

std::string ShellQuote(absl::string_view word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string ExecCommand(const std::vector<std::string>& words) {
  return absl::StrCat("exec ",
                      absl::StrJoin(words, " ", [](std::string* out, const std::string& w) {
                        out->append(ShellQuote(w));
                      }));
}

std::string EntrypointCheckCommand(absl::string_view program) {
  return absl::StrCat("p=", ShellQuote(program),
                      "; case $p in */*) [ -f \"$p\" ] && [ -x \"$p\" ] ;; *) command -v \"$p\" "
                      ">/dev/null 2>&1 ;; esac");
}

std::string EntrypointNotRunnableMessage(absl::string_view program) {
  return absl::StrCat(
      "\"entrypoint\": ", QuoteForMessage(program),
      " is not a program the sandbox can run (not in its PATH, or not an executable file); "
      "give one its image has, e.g. [\"tail\", \"-f\", \"/dev/null\"]");
}

}  // namespace moat
