#include "sandbox/policy/protected_paths.h"

#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/policy/policy.h"

namespace moat::sandbox {
namespace {

constexpr absl::string_view kUnderEachRoot[] = {
    ".git/hooks", ".git/config", ".pi",     ".moat", ".agents",
    ".claude",    ".mcp.json",   ".vscode", ".idea", ".envrc",
};

constexpr absl::string_view kUnderHome[] = {
    ".bashrc",        ".bash_profile", ".bash_login",  ".bash_logout",      ".profile",
    ".zshrc",         ".zshenv",       ".zprofile",    ".zlogin",           ".gitconfig",
    ".config/git",    ".ssh",          ".config/moat", ".config/autostart", ".config/systemd",
    ".config/direnv", ".pi",           ".claude",      ".agents",
};

// The deepest of `roots` that holds `path`, or "" if none does.
std::string RootOf(const std::string& path, const std::vector<std::string>& roots) {
  std::string best;
  for (const std::string& root : roots) {
    if (IsPathUnder(path, root) && root.size() > best.size()) best = root;
  }
  return best;
}

bool IsDirectoryNoFollow(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

absl::Span<const absl::string_view> ProtectedUnderEachRoot() { return kUnderEachRoot; }

absl::Span<const absl::string_view> ProtectedUnderHome() { return kUnderHome; }

std::vector<ProtectedName> CreationProtection(const std::vector<std::string>& readonly_paths,
                                              const std::vector<std::string>& writable_roots) {
  std::vector<ProtectedName> out;
  for (const std::string& path : readonly_paths) {
    const std::string root = RootOf(path, writable_roots);
    if (root.empty() || root == path) continue;
    std::string dir = root;
    const absl::string_view rest =
        absl::string_view(path).substr(root == "/" ? 1 : root.size() + 1);
    for (absl::string_view name : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
      if (!IsDirectoryNoFollow(dir)) break;  // nothing can be made below a missing directory
      ProtectedName pair{dir, std::string(name)};
      if (std::find(out.begin(), out.end(), pair) == out.end()) out.push_back(pair);
      dir = dir == "/" ? absl::StrCat("/", name) : absl::StrCat(dir, "/", name);
    }
  }
  return out;
}

std::vector<ProtectedGlob> IdentifyProtectedGlobs(const std::vector<std::string>& patterns,
                                                  const std::vector<std::string>& writable_roots) {
  if (patterns.empty()) return {};  // the common case: no stat on the start path
  std::vector<dev_t> devs;
  for (const std::string& root : writable_roots) {
    struct stat st;
    if (::stat(root.c_str(), &st) == 0 &&
        std::find(devs.begin(), devs.end(), st.st_dev) == devs.end()) {
      devs.push_back(st.st_dev);
    }
  }
  std::vector<ProtectedGlob> out;
  if (devs.empty()) return out;  // nothing writable: nothing can be made
  for (const std::string& text : patterns) {
    absl::StatusOr<PathPattern> pattern = PathPattern::FromString(text);
    if (!pattern.ok()) continue;  // ResolvePolicy checked them; nothing else makes them
    ProtectedGlob g{pattern->glob, pattern->recursive, 0, 0, devs, text};
    if (!pattern->recursive) {
      struct stat st;
      if (::lstat(pattern->dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      g.dev = st.st_dev;
      g.ino = st.st_ino;
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<ProtectedEntry> IdentifyProtected(const std::vector<ProtectedName>& names) {
  std::vector<ProtectedEntry> out;
  for (const ProtectedName& n : names) {
    struct stat st;
    if (::lstat(n.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    out.push_back(ProtectedEntry{
        st.st_dev, st.st_ino, n.name,
        n.dir == "/" ? absl::StrCat("/", n.name) : absl::StrCat(n.dir, "/", n.name)});
  }
  return out;
}

}  // namespace moat::sandbox
