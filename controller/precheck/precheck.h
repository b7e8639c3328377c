// The pre-check (the OpenSandbox article, section 4.1): a static look at a command or code
// before the controller lets it run, which assigns risk tags. Tags never refuse on their own;
// the risk they add up to decides what happens (docs/security.md):
//   low     runs as asked;
//   medium  runs under the stricter policy named by precheck.medium_policy in the config;
//   high    waits in PendingApproval until an administrator approves or rejects it (approvals.h).
//
// The rules are line-based regular expressions, one table per language (shell, Python,
// JavaScript), plus a few that join lines of one snippet (something decoded in one line and
// executed in another). It is a tripwire for what models write when steered by a hostile prompt,
// not a sandbox: the kernel's sandbox still holds whatever the scan misses, and the corpus in
// precheck_test.cc measures its misses and false alarms.
//
// Tags:
//   shell-out        os.system, subprocess(..., shell=True), child_process.exec: low
//   shell-pipe       the same with a pipe, redirect, ';', '&&' or '$(' in it: medium
//   dynamic-eval     eval/exec/new Function of something built at run time: medium
//   decode-exec      base64 or hex decoded, then executed: high
//   sensitive-path   ~/.ssh, /etc/shadow, cloud credential files, /proc/*/mem, ...: high
//                    (/etc/passwd, /proc/self/environ: medium)
//   download-exec    curl | sh, wget && chmod +x, exec(urlopen(...).read()): high
//   reverse-shell    /dev/tcp/, nc -e, pty.spawn with a socket: high
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace moat::controller::precheck {

enum class Language { kShell, kPython, kJavaScript };
enum class Risk { kLow = 0, kMedium = 1, kHigh = 2 };

absl::string_view RiskName(Risk risk);  // "low", "medium", "high"
// "python", "py", "python3", "javascript", "js", "node", "typescript", "ts", "shell", "sh",
// "bash"; nullopt for anything else.
std::optional<Language> ParseLanguage(absl::string_view name);

struct Finding {
  std::string tag;
  Risk risk = Risk::kLow;
  int line = 0;          // 1-based.
  std::string evidence;  // The matched text, at most 120 bytes.
};

struct Verdict {
  Risk risk = Risk::kLow;         // The highest finding's; low when there is none.
  std::vector<Finding> findings;  // In line order, one per tag and line.

  // The distinct tags, sorted.
  std::vector<std::string> Tags() const;
};

// Code larger than this is not scanned line by line: it is high risk as a whole (tag
// "too-large-to-scan"), since a reviewer, not a regex, should read it.
inline constexpr size_t kMaxScanBytes = 1 << 20;

Verdict Scan(absl::string_view code, Language language);

// A command line, as execd's POST /command or `moat run -- CMD` receives it: scanned as shell,
// and also as Python when it runs python and as JavaScript when it runs node or deno (their -c,
// -e and heredoc code is part of the line).
Verdict ScanCommand(absl::string_view command);

}  // namespace moat::controller::precheck
