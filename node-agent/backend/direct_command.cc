#include "node-agent/backend/direct_command.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace moat::agent {
namespace {

// Characters no shell treats specially in any position of a word but the first ('=' makes an
// assignment of a first word; later it is plain). Anything else (quotes, '$', '`', '\\', globs,
// '~', '#', operators, redirections, braces, '!', newlines) needs the shell.
bool Plain(char c, bool first_word) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '_':
    case '.':
    case '/':
    case ':':
    case ',':
    case '@':
    case '%':
    case '+':
    case '-':
      return true;
    case '=':
      return !first_word;
    default:
      return false;
  }
}

// dash's builtins and reserved words (dash(1)) made of plain characters: the shell runs them
// itself, whatever PATH holds.
constexpr absl::string_view kShellWords[] = {
    ".",        ":",      "alias",   "bg",    "break", "case",   "cd",   "chdir",   "command",
    "continue", "do",     "done",    "echo",  "elif",  "else",   "esac", "eval",    "exec",
    "exit",     "export", "false",   "fc",    "fg",    "fi",     "for",  "getopts", "hash",
    "if",       "in",     "jobs",    "kill",  "local", "printf", "pwd",  "read",    "readonly",
    "return",   "set",    "shift",   "test",  "then",  "times",  "trap", "true",    "type",
    "ulimit",   "umask",  "unalias", "unset", "until", "wait",   "while"};

bool IsShellWord(absl::string_view word) {
  return std::find(std::begin(kShellWords), std::end(kShellWords), word) != std::end(kShellWords);
}

}  // namespace

std::optional<std::vector<std::string>> DirectArgv(absl::string_view command,
                                                   absl::string_view path) {
  std::vector<std::string> words =
      absl::StrSplit(command, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (words.empty()) return std::nullopt;
  for (size_t i = 0; i < words.size(); ++i) {
    for (char c : words[i]) {
      if (!Plain(c, i == 0)) return std::nullopt;
    }
  }
  if (IsShellWord(words[0])) return std::nullopt;
  if (words[0].find('/') == std::string::npos) {
    if (path.empty()) return std::nullopt;
    for (absl::string_view dir : absl::StrSplit(path, ':')) {
      if (dir.empty()) return std::nullopt;
    }
  }
  return words;
}

}  // namespace moat::agent
