#include "controller/precheck/precheck.h"

#include <algorithm>
#include <regex>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moat::controller::precheck {
namespace {

// Lines longer than this are scanned in overlapping windows: std::regex recurses per character
// and must not meet an unbounded line (minified code, a base64 blob).
constexpr size_t kWindow = 2048, kOverlap = 256;

struct Rule {
  const char* tag;
  Risk risk;
  std::regex re;
};

std::regex Re(const char* pattern, bool icase = false) {
  auto flags = std::regex::ECMAScript | std::regex::optimize;
  if (icase) flags |= std::regex::icase;
  return std::regex(pattern, flags);
}

// Shell metacharacters that make a shell-out more than one program: pipes, redirects,
// sequencing, substitution; looked for in the string literal the shell-out is given.
constexpr char kMeta[] = R"((\||>|<|;|&&|\$\(|`))";

// Paths whose mere mention is worth a tag, in every language.
const std::vector<Rule>& PathRules() {
  static const auto* rules = new std::vector<Rule>{
      {"sensitive-path", Risk::kHigh,
       Re(R"((~|\$HOME|\$\{HOME\}|/root|/home/[^/\s'"]+|expanduser\([^)]*)/?\.ssh\b|\.ssh/(id_|authorized_keys|known_hosts))")},
      {"sensitive-path", Risk::kHigh, Re(R"(/etc/(shadow|gshadow|sudoers)\b)")},
      {"sensitive-path", Risk::kHigh,
       Re(R"(\.aws/(credentials|config)|\.config/gcloud|application_default_credentials|\.azure/|\.kube/config|\.docker/config\.json|\.netrc\b|\.git-credentials|\.pgpass\b)")},
      {"sensitive-path", Risk::kHigh,
       Re(R"(/proc/([0-9]+|self|\*|\$\w+|\{\w*\}|'\s*\+)[^\s'"]*/mem\b|/dev/(k?mem)\b)")},
      {"sensitive-path", Risk::kHigh, Re(R"(/var/run/secrets/|/run/secrets/kubernetes)")},
      {"sensitive-path", Risk::kHigh, Re(R"(169\.254\.169\.254|metadata\.google\.internal)")},
      {"sensitive-path", Risk::kMedium, Re(R"(/etc/passwd\b|/proc/(self|1|[0-9]+)/environ\b)")},
  };
  return *rules;
}

const std::vector<Rule>& ShellRules() {
  static const auto* rules = new std::vector<Rule>{
      {"download-exec", Risk::kHigh,
       Re(R"(\b(curl|wget|fetch)\b[^|]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b|\b(curl|wget)\b[^|]*\|\s*(sudo\s+)?(python[0-9.]*|perl|ruby|node)\b)")},
      {"download-exec", Risk::kHigh,
       Re(R"((ba)?sh\s+<\(\s*(curl|wget)|(ba)?sh\s+-c\s+["']?\$\(\s*(curl|wget))")},
      {"download-exec", Risk::kHigh,
       Re(R"(\b(curl|wget)\b.*(-o|-O|--output)\s*\S+.*&&.*(chmod\s+\+?[0-7]*x|\s(ba)?sh\s+\S+|\./))")},
      {"decode-exec", Risk::kHigh,
       Re(R"((base64\s+(-d|--decode|-D)|xxd\s+-r|openssl\s+(base64|enc)\s+.*-d)[^|]*\|\s*(sudo\s+)?((ba|z|da)?sh|python[0-9.]*|perl|node)\b)")},
      {"decode-exec", Risk::kHigh,
       Re(R"(\beval\s+["']?\$\(\s*(echo|printf)\b.*\|\s*(base64|xxd))")},
      {"dynamic-eval", Risk::kMedium, Re(R"((^|[;&|(]\s*)eval\s+["']?\$)")},
      {"reverse-shell", Risk::kHigh,
       Re(R"(/dev/(tcp|udp)/|\b(nc|ncat|netcat)\b.*\s-[a-z]*[ec]\s|\bsocat\b.*exec:|\bmkfifo\b.*\b(nc|ncat)\b)")},
  };
  return *rules;
}

const std::vector<Rule>& PythonRules() {
  static const auto* rules = new std::vector<Rule>{
      // os.system and friends hand the whole string to /bin/sh.
      {"shell-pipe", Risk::kMedium,
       Re((std::string(R"(\bos\.(system|popen)\s*\(\s*[fr]?["'][^"']*)") + kMeta).c_str())},
      {"shell-out", Risk::kLow, Re(R"(\bos\.(system|popen|exec[lv]p?e?|spawn[lv]p?e?)\s*\()")},
      {"shell-pipe", Risk::kMedium,
       Re((std::string(R"(\bsubprocess\.\w+\s*\(\s*[fr]?["'][^"']*)") + kMeta +
           R"(.*shell\s*=\s*True)")
              .c_str())},
      {"shell-out", Risk::kLow,
       Re(R"(\bsubprocess\.\w+\s*\(.*shell\s*=\s*True|\bcommands\.getoutput\s*\()")},
      {"download-exec", Risk::kHigh,
       Re(R"(\b(exec|eval)\s*\(.*\b(urlopen|urlretrieve|requests\.get|httpx\.get|urllib3|http\.client)\b)")},
      {"decode-exec", Risk::kHigh,
       Re(R"(\b(exec|eval|compile)\s*\(.*\b(b64decode|b32decode|a85decode|fromhex|unhexlify|codecs\.decode|decompress|marshal\.loads)\b)")},
      {"decode-exec", Risk::kHigh,
       Re(R"(\bmarshal\.loads\s*\(.*\b(b64decode|fromhex|unhexlify)\b)")},
      // exec/eval of anything but a plain string literal; model.eval() and df.eval() are methods.
      {"dynamic-eval", Risk::kMedium,
       Re(R"((^|[^\w.])(exec|eval)\s*\(\s*(?!["'][^"']*["']\s*\))[^)\s])")},
      {"dynamic-eval", Risk::kMedium,
       Re(R"(\b__import__\s*\(\s*[^"'\s]|\bimportlib\.import_module\s*\(\s*[^"'\s])")},
      {"reverse-shell", Risk::kHigh, Re(R"(\bpty\.spawn\s*\(|os\.dup2\s*\(\s*\w+\.fileno\(\))")},
  };
  return *rules;
}

const std::vector<Rule>& JavaScriptRules() {
  static const auto* rules = new std::vector<Rule>{
      {"shell-pipe", Risk::kMedium,
       Re((std::string(R"(\b(exec|execSync)\s*\(\s*[`'"][^`'"]*)") + kMeta).c_str())},
      {"shell-out", Risk::kLow,
       Re(R"((child_process|\bcp)\.(exec|execSync)\s*\(|\b(exec|execSync)\s*\(\s*[`'"])")},
      {"shell-out", Risk::kLow, Re(R"(\b(spawn|spawnSync|execFile)\s*\(.*shell\s*:\s*true)")},
      {"download-exec", Risk::kHigh,
       Re(R"(\b(eval|Function|runInNewContext|runInThisContext)\s*\(.*\b(fetch|axios|https?\.get|got)\b)")},
      {"decode-exec", Risk::kHigh,
       Re(R"(\b(eval|Function|runInNewContext|runInThisContext)\s*\(.*(atob\s*\(|['"](base64|hex)['"]))")},
      // eval/new Function of anything but a plain string literal; obj.eval() is a method.
      {"dynamic-eval", Risk::kMedium,
       Re(R"((^|[^\w.$])eval\s*\(\s*(?!["'][^"']*["']\s*\))[^)\s]|\bnew\s+Function\s*\(|\bvm\.(runIn\w+|Script)\s*\(|\bset(Timeout|Interval)\s*\(\s*["'`])")},
      {"reverse-shell", Risk::kHigh,
       Re(R"(\bnet\.(connect|Socket|createConnection)\b.*\b(sh|bash|cmd)\b|\.pipe\(\s*\w+\.stdin\s*\))")},
  };
  return *rules;
}

// What decodes in each language; with an exec sink elsewhere in the snippet, decode-exec.
const std::regex& Decodes(Language l) {
  static const auto* py = new std::regex(
      Re(R"(\b(b64decode|b32decode|a85decode|fromhex|unhexlify|codecs\.decode)\s*\()"));
  static const auto* js =
      new std::regex(Re(R"(\batob\s*\(|Buffer\.from\s*\([^)]*['"](base64|hex)['"])"));
  static const auto* sh = new std::regex(Re(R"(base64\s+(-d|--decode)|xxd\s+-r)"));
  return l == Language::kPython ? *py : l == Language::kJavaScript ? *js : *sh;
}

const std::vector<Rule>& RulesFor(Language l) {
  return l == Language::kPython       ? PythonRules()
         : l == Language::kJavaScript ? JavaScriptRules()
                                      : ShellRules();
}

// Python and shell comments are not code; JavaScript's "//" would cut URLs, so only lines that
// start with it go.
bool IsComment(absl::string_view line, Language l) {
  absl::string_view t = absl::StripLeadingAsciiWhitespace(line);
  if (l == Language::kJavaScript) return absl::StartsWith(t, "//") || absl::StartsWith(t, "*");
  return absl::StartsWith(t, "#") && !absl::StartsWith(t, "#!");
}

void Add(Verdict& v, std::set<std::pair<std::string, int>>& seen, const char* tag, Risk risk,
         int line, absl::string_view evidence) {
  if (!seen.emplace(tag, line).second) return;
  v.findings.push_back({tag, risk, line, std::string(evidence.substr(0, 120))});
  v.risk = std::max(v.risk, risk);
}

void ScanInto(Verdict& v, std::set<std::pair<std::string, int>>& seen, absl::string_view code,
              Language language) {
  std::vector<absl::string_view> lines = absl::StrSplit(code, '\n');
  int decoded_at = 0, evaluated_at = 0;
  for (size_t n = 0; n < lines.size(); ++n) {
    absl::string_view line = lines[n];
    if (IsComment(line, language)) continue;
    const int number = static_cast<int>(n) + 1;
    for (size_t at = 0; at < line.size(); at += kWindow - kOverlap) {
      absl::string_view part = line.substr(at, kWindow);
      std::cmatch m;
      auto match = [&](const std::regex& re) {
        return std::regex_search(part.data(), part.data() + part.size(), m, re);
      };
      // One tag per family and line: the first (strongest) rule of a tag wins, and shell-pipe
      // supersedes shell-out.
      for (const std::vector<Rule>* rules : {&PathRules(), &RulesFor(language)}) {
        for (const Rule& r : *rules) {
          if (seen.contains({r.tag, number})) continue;
          if (std::string_view(r.tag) == "shell-out" && seen.contains({"shell-pipe", number})) {
            continue;
          }
          if (match(r.re)) Add(v, seen, r.tag, r.risk, number, m.str(0));
        }
      }
      if (decoded_at == 0 && match(Decodes(language))) decoded_at = number;
      if (at + kWindow >= line.size()) break;
    }
    if (evaluated_at == 0 && seen.contains({"dynamic-eval", number})) evaluated_at = number;
  }
  // Decoded in one line, executed in another: x = b64decode(...); exec(x).
  if (decoded_at > 0 && evaluated_at > 0) {
    Add(v, seen, "decode-exec", Risk::kHigh, evaluated_at,
        absl::StrCat("decoded at line ", decoded_at, ", executed at line ", evaluated_at));
  }
}

Verdict Finish(Verdict v) {
  std::stable_sort(v.findings.begin(), v.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.line < b.line; });
  return v;
}

}  // namespace

absl::string_view RiskName(Risk risk) {
  switch (risk) {
    case Risk::kLow:
      return "low";
    case Risk::kMedium:
      return "medium";
    case Risk::kHigh:
      return "high";
  }
  return "high";
}

std::optional<Language> ParseLanguage(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "python" || n == "py" || n == "python3") return Language::kPython;
  if (n == "javascript" || n == "js" || n == "node" || n == "typescript" || n == "ts") {
    return Language::kJavaScript;
  }
  if (n == "shell" || n == "sh" || n == "bash") return Language::kShell;
  return std::nullopt;
}

std::vector<std::string> Verdict::Tags() const {
  std::set<std::string> tags;
  for (const Finding& f : findings) tags.insert(f.tag);
  return {tags.begin(), tags.end()};
}

Verdict Scan(absl::string_view code, Language language) {
  Verdict v;
  std::set<std::pair<std::string, int>> seen;
  if (code.size() > kMaxScanBytes) {
    Add(v, seen, "too-large-to-scan", Risk::kHigh, 1,
        absl::StrCat(code.size(), " bytes, more than ", kMaxScanBytes));
    return v;
  }
  ScanInto(v, seen, code, language);
  return Finish(std::move(v));
}

Verdict ScanCommand(absl::string_view command) {
  Verdict v;
  std::set<std::pair<std::string, int>> seen;
  if (command.size() > kMaxScanBytes) {
    Add(v, seen, "too-large-to-scan", Risk::kHigh, 1,
        absl::StrCat(command.size(), " bytes, more than ", kMaxScanBytes));
    return v;
  }
  ScanInto(v, seen, command, Language::kShell);
  static const auto* python = new std::regex(Re(R"(\bpython[0-9.]*\b|\bipython\b)"));
  static const auto* node = new std::regex(Re(R"(\b(node|nodejs|deno|bun)\b)"));
  std::string text(command.substr(0, 4096));  // The interpreter is named near the start.
  if (std::regex_search(text, *python)) ScanInto(v, seen, command, Language::kPython);
  if (std::regex_search(text, *node)) ScanInto(v, seen, command, Language::kJavaScript);
  return Finish(std::move(v));
}

}  // namespace moat::controller::precheck
