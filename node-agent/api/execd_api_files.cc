// The file half of the per-sandbox API (see execd_api.h). Every path is checked with
// SandboxPath (lexically inside /workspace) before the backend, which resolves it again
// without leaving the workspace.
#include <httplib.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "node-agent/api/execd_api.h"
#include "node-agent/api/execd_api_internal.h"
#include "node-agent/backend/workspace_files.h"

namespace moat::agent {
namespace {

using nlohmann::json;
using namespace execd_internal;  // NOLINT: this file's own helpers.

constexpr size_t kMaxPatternBytes = 256;
constexpr size_t kMaxPathsPerRequest = 1000;

// Permission bits as the spec writes them: 0755 is the number 755.
int OctalDigits(uint32_t mode) {
  int out = 0;
  for (uint32_t bits = mode & 07777, place = 1; bits != 0; bits >>= 3, place *= 10) {
    out += static_cast<int>((bits & 7) * place);
  }
  return out;
}

// The reverse, for a client's "mode": 755 -> 0755. InvalidArgument unless digits 0..7.
absl::StatusOr<uint32_t> ModeFromDigits(const json& value) {
  if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0)) {
    return absl::InvalidArgumentError("\"mode\" must be octal digits as a number, e.g. 644");
  }
  uint64_t digits = value.get<uint64_t>();
  uint32_t mode = 0;
  int shift = 0;
  for (uint64_t d = digits; d > 0; d /= 10, shift += 3) {
    if (d % 10 > 7 || shift > 9) {
      return absl::InvalidArgumentError("\"mode\" must be octal digits as a number, e.g. 644");
    }
    mode |= static_cast<uint32_t>(d % 10) << shift;
  }
  return mode;
}

const char* TypeName(const FileInfo& info) {
  if (info.is_dir) return "directory";
  switch (info.type) {
    case FileType::kFile:
      return "file";
    case FileType::kDirectory:
      return "directory";
    case FileType::kSymlink:
      return "symlink";
    case FileType::kOther:
      break;
  }
  return "other";
}

// FileInfo of the spec. The backend knows no owner, group or creation time: owner and group
// are empty and created_at is the modification time.
json FileInfoJson(const FileInfo& info) {
  return {{"path", info.path},
          {"type", TypeName(info)},
          {"size", info.size},
          {"modified_at", FormatApiTime(info.modified)},
          {"created_at", FormatApiTime(info.modified)},
          {"owner", ""},
          {"group", ""},
          {"mode", OctalDigits(info.mode)}};
}

// The "path" query parameters (one or more), checked.
absl::StatusOr<std::vector<std::string>> PathParams(const httplib::Request& req,
                                                    const std::map<std::string, std::string>& env) {
  size_t count = req.get_param_value_count("path");
  if (count == 0) return absl::InvalidArgumentError("give at least one ?path=");
  if (count > kMaxPathsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxPathsPerRequest, " paths per request"));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<std::string> path = SandboxPath(req.get_param_value("path", i), env);
    if (!path.ok()) return path.status();
    out.push_back(*std::move(path));
  }
  return out;
}

// Glob match: '*' and '?' stay within a path component, "**" crosses them, and "**/" matches
// zero or more whole components. Memoised over (pattern position, text position), so no
// pattern makes it exponential.
class Glob {
 public:
  Glob(absl::string_view pattern, absl::string_view text)
      : p_(pattern), t_(text), memo_(2 * (p_.size() + 1) * (t_.size() + 1), kUnknown) {}
  bool Match() { return At(0, 0); }

 private:
  static constexpr int8_t kUnknown = -1;

  bool At(size_t p, size_t t) {
    int8_t& m = memo_[p * (t_.size() + 1) + t];
    if (m == kUnknown) m = Compute(p, t);
    return m;
  }
  // After "**/" at p: some later '/' ends the skipped components.
  bool AfterSlash(size_t p, size_t t) {
    int8_t& m = memo_[(p_.size() + 1 + p) * (t_.size() + 1) + t];
    if (m == kUnknown) {
      m = t < t_.size() && ((t_[t] == '/' && At(p + 3, t + 1)) || AfterSlash(p, t + 1));
    }
    return m;
  }
  bool Compute(size_t p, size_t t) {
    if (p == p_.size()) return t == t_.size();
    bool more = t < t_.size();
    if (p_.substr(p, 3) == "**/") return At(p + 3, t) || AfterSlash(p, t);
    if (p_.substr(p, 2) == "**") return At(p + 2, t) || (more && At(p, t + 1));
    if (p_[p] == '*') return At(p + 1, t) || (more && t_[t] != '/' && At(p, t + 1));
    if (p_[p] == '?') return more && t_[t] != '/' && At(p + 1, t + 1);
    return more && t_[t] == p_[p] && At(p + 1, t + 1);
  }

  absl::string_view p_, t_;
  std::vector<int8_t> memo_;
};

bool GlobMatch(absl::string_view pattern, absl::string_view text) {
  return Glob(pattern, text).Match();
}

// "a/b/c" relative to "/workspace/a" is "b/c".
absl::string_view RelativeTo(absl::string_view root, absl::string_view path) {
  absl::ConsumePrefix(&path, root);
  absl::ConsumePrefix(&path, "/");
  return path;
}

absl::string_view BaseName(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// Range: bytes=a-b | a- | -n, one range. Nullopt if unparsable or unsatisfiable for `size`.
std::optional<std::pair<uint64_t, uint64_t>> ParseRange(absl::string_view header, uint64_t size) {
  if (!absl::ConsumePrefix(&header, "bytes=") || header.find(',') != absl::string_view::npos) {
    return std::nullopt;
  }
  size_t dash = header.find('-');
  if (dash == absl::string_view::npos || size == 0) return std::nullopt;
  absl::string_view a = header.substr(0, dash), b = header.substr(dash + 1);
  uint64_t first = 0, last = 0;
  if (a.empty()) {  // The last n bytes.
    uint64_t n = 0;
    if (!absl::SimpleAtoi(b, &n) || n == 0) return std::nullopt;
    return std::make_pair(size - std::min(n, size), size - 1);
  }
  if (!absl::SimpleAtoi(a, &first) || first >= size) return std::nullopt;
  if (b.empty()) return std::make_pair(first, size - 1);
  if (!absl::SimpleAtoi(b, &last) || last < first) return std::nullopt;
  return std::make_pair(first, std::min(last, size - 1));
}

}  // namespace

void ExecdApi::RegisterFileRoutes(httplib::Server& s) {
  // Each handler: the sandbox must take requests; each path is checked before the backend.
  s.Get(Route("/files/info"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    absl::StatusOr<std::vector<std::string>> paths = PathParams(req, record->env);
    if (!paths.ok()) return SendStatus(res, paths.status());
    json out = json::object();
    for (size_t i = 0; i < paths->size(); ++i) {
      absl::StatusOr<FileInfo> info = backend_->Stat(record->id, (*paths)[i]);
      if (!info.ok()) return SendStatus(res, info.status());
      out[req.get_param_value("path", i)] = FileInfoJson(*info);
    }
    SendJson(res, out);
  });
  s.Delete(Route("/files"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    absl::StatusOr<std::vector<std::string>> paths = PathParams(req, record->env);
    if (!paths.ok()) return SendStatus(res, paths.status());
    for (const std::string& path : *paths) {
      absl::StatusOr<FileInfo> info = backend_->Stat(record->id, path);
      if (!info.ok()) return SendStatus(res, info.status());
      if (info->is_dir) {
        return SendError(res, 400,
                         absl::StrCat("\"", path, "\" is a directory; use DELETE /directories"));
      }
      if (absl::Status s = backend_->Remove(record->id, path); !s.ok()) {
        return SendStatus(res, s);
      }
    }
    res.status = 200;
  });
  s.Post(Route("/files/mv"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    absl::StatusOr<json> doc = ParseBody(req.body);
    if (!doc.ok()) return SendStatus(res, doc.status());
    if (!doc->is_array() || doc->empty() || doc->size() > kMaxPathsPerRequest) {
      return SendError(res, 400, "the body must be a non-empty array of {\"src\", \"dest\"}");
    }
    std::vector<std::pair<std::string, std::string>> moves;
    for (const json& item : *doc) {
      if (!item.is_object() || !item.contains("src") || !item.contains("dest") ||
          !item["src"].is_string() || !item["dest"].is_string() || item.size() != 2) {
        return SendError(res, 400, "each item must be {\"src\": path, \"dest\": path}");
      }
      absl::StatusOr<std::string> src = SandboxPath(item["src"].get<std::string>(), record->env);
      if (!src.ok()) return SendStatus(res, src.status());
      absl::StatusOr<std::string> dest = SandboxPath(item["dest"].get<std::string>(), record->env);
      if (!dest.ok()) return SendStatus(res, dest.status());
      moves.emplace_back(*src, *dest);
    }
    for (const auto& [src, dest] : moves) {
      if (absl::Status s = backend_->Move(record->id, src, dest); !s.ok()) {
        return SendStatus(res, s);
      }
    }
    res.status = 200;
  });
  s.Get(Route("/files/search"),
        [this](const httplib::Request& req, httplib::Response& res) { Search(req, res); });
  s.Post(Route("/files/upload"),
         [this](const httplib::Request& req, httplib::Response& res) { Upload(req, res); });
  s.Get(Route("/files/download"),
        [this](const httplib::Request& req, httplib::Response& res) { Download(req, res); });
  s.Post(Route("/files/replace"),
         [this](const httplib::Request& req, httplib::Response& res) { Replace(req, res); });
  // execd's chmodFiles: path -> {mode, owner, group}. Owner and group are names or ids inside
  // the sandbox's user namespace, which maps only root (0): another one is a 400.
  s.Post(Route("/files/permissions"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    absl::StatusOr<json> doc = ParseBody(req.body);
    if (!doc.ok()) return SendStatus(res, doc.status());
    if (!doc->is_object() || doc->empty() || doc->size() > kMaxPathsPerRequest) {
      return SendError(res, 400,
                       "the body must be an object of path -> {\"mode\": 755, \"owner\": "
                       "\"root\", \"group\": \"root\"}");
    }
    std::vector<std::pair<std::string, uint32_t>> items;
    for (const auto& [key, item] : doc->items()) {
      if (!item.is_object() || !item.contains("mode")) {
        return SendError(res, 400,
                         absl::StrCat("\"", key, "\" must map to {\"mode\": octal digits}"));
      }
      for (const char* who : {"owner", "group"}) {
        if (!item.contains(who)) continue;
        const json& v = item[who];
        bool mapped = (v.is_string() && (v == "root" || v == "0" || v == "")) ||
                      (v.is_number_integer() && v == 0);
        if (!mapped) {
          return SendError(res, 400,
                           absl::StrCat("\"", key, "\": ", who, " ", v.dump(),
                                        " is not mapped in the sandbox's user namespace, which "
                                        "maps only root (0); give \"root\" or leave it out"));
        }
      }
      absl::StatusOr<uint32_t> mode = ModeFromDigits(item["mode"]);
      if (!mode.ok()) return SendStatus(res, mode.status());
      absl::StatusOr<std::string> path = SandboxPath(key, record->env);
      if (!path.ok()) return SendStatus(res, path.status());
      items.emplace_back(*path, *mode);
    }
    for (const auto& [path, mode] : items) {
      if (absl::Status s = backend_->SetMode(record->id, path, mode); !s.ok()) {
        return SendStatus(res, s);
      }
    }
    res.status = 200;
  });
  s.Post(Route("/directories"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    absl::StatusOr<json> doc = ParseBody(req.body);
    if (!doc.ok()) return SendStatus(res, doc.status());
    if (!doc->is_object() || doc->empty() || doc->size() > kMaxPathsPerRequest) {
      return SendError(res, 400, "the body must be an object of directory path -> {\"mode\": 755}");
    }
    // Each directory, with the mode it asks for (none: as made, 0755).
    std::vector<std::pair<std::string, std::optional<uint32_t>>> dirs;
    for (const auto& [path, permission] : doc->items()) {
      if (!permission.is_object() && !permission.is_null()) {
        return SendError(res, 400, absl::StrCat("\"", path, "\" must map to {\"mode\": 755}"));
      }
      std::optional<uint32_t> wanted;
      if (permission.is_object() && permission.contains("mode")) {
        absl::StatusOr<uint32_t> mode = ModeFromDigits(permission["mode"]);
        if (!mode.ok()) return SendStatus(res, mode.status());
        wanted = *mode;
      }
      absl::StatusOr<std::string> dir = SandboxPath(path, record->env);
      if (!dir.ok()) return SendStatus(res, dir.status());
      dirs.emplace_back(*dir, wanted);
    }
    for (const auto& [dir, mode] : dirs) {
      if (absl::Status s = backend_->MakeDirectory(record->id, dir); !s.ok()) {
        return SendStatus(res, s);
      }
      // The directory asked for gets its mode (mode & 0777, as files/permissions sets it, so no
      // umask applies); the parents made on the way stay 0755, as `mkdir -p -m` makes them.
      if (mode.has_value()) {
        if (absl::Status s = backend_->SetMode(record->id, dir, *mode); !s.ok()) {
          return SendStatus(res, s);
        }
      }
    }
    res.status = 200;
  });
  s.Delete(Route("/directories"), [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
    if (!record.ok()) return SendStatus(res, record.status());
    absl::StatusOr<std::vector<std::string>> paths = PathParams(req, record->env);
    if (!paths.ok()) return SendStatus(res, paths.status());
    for (const std::string& path : *paths) {
      if (path == "/workspace") {
        return SendError(res, 400, "/workspace itself cannot be removed; remove what is in it");
      }
      absl::StatusOr<FileInfo> info = backend_->Stat(record->id, path);
      if (!info.ok()) return SendStatus(res, info.status());
      if (!info->is_dir) {
        return SendError(res, 400,
                         absl::StrCat("\"", path, "\" is not a directory; use DELETE /files"));
      }
      if (absl::Status s = backend_->Remove(record->id, path); !s.ok()) {
        return SendStatus(res, s);
      }
    }
    res.status = 200;
  });
  s.Get(Route("/directories/list"),
        [this](const httplib::Request& req, httplib::Response& res) { ListDirectory(req, res); });
}

void ExecdApi::Search(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
  if (!record.ok()) return SendStatus(res, record.status());
  if (!req.has_param("path")) return SendError(res, 400, "give the directory: ?path=");
  absl::StatusOr<std::string> root = SandboxPath(req.get_param_value("path"), record->env);
  if (!root.ok()) return SendStatus(res, root.status());
  std::string pattern = req.has_param("pattern") ? req.get_param_value("pattern") : "**";
  if (pattern.empty() || pattern.size() > kMaxPatternBytes) {
    return SendError(res, 400,
                     absl::StrCat("the pattern must be 1 to ", kMaxPatternBytes, " bytes"));
  }
  // A pattern without '/' is matched against names ("*.txt" anywhere below the root), as a
  // user expects; with '/', against the path relative to the root.
  bool by_name = pattern.find('/') == std::string::npos;
  json out = json::array();
  bool truncated = false;
  size_t visited = 0;
  std::deque<std::string> queue = {*root};
  while (!queue.empty() && !truncated) {
    absl::StatusOr<std::vector<FileInfo>> entries = backend_->List(record->id, queue.front());
    queue.pop_front();
    if (!entries.ok()) {
      if (out.empty() && visited == 0) return SendStatus(res, entries.status());
      continue;  // Removed while we walked.
    }
    for (const FileInfo& entry : *entries) {
      if (++visited > options_.max_walk_entries || out.size() >= options_.max_search_results) {
        truncated = true;
        break;
      }
      if (entry.is_dir) {
        queue.push_back(entry.path);
        continue;
      }
      absl::string_view subject = by_name ? BaseName(entry.path) : RelativeTo(*root, entry.path);
      if (GlobMatch(pattern, subject)) out.push_back(FileInfoJson(entry));
    }
  }
  if (truncated) res.set_header("X-Moat-Truncated", "true");
  SendJson(res, out);
}

void ExecdApi::ListDirectory(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
  if (!record.ok()) return SendStatus(res, record.status());
  if (!req.has_param("path")) return SendError(res, 400, "give the directory: ?path=");
  absl::StatusOr<std::string> root = SandboxPath(req.get_param_value("path"), record->env);
  if (!root.ok()) return SendStatus(res, root.status());
  int depth = 1;
  if (req.has_param("depth") && (!absl::SimpleAtoi(req.get_param_value("depth"), &depth) ||
                                 depth < 0 || depth > options_.max_list_depth)) {
    return SendError(
        res, 400,
        absl::StrCat("\"depth\" must be a whole number from 0 to ", options_.max_list_depth));
  }
  absl::StatusOr<FileInfo> info = backend_->Stat(record->id, *root);
  if (!info.ok()) return SendStatus(res, info.status());
  if (!info->is_dir) return SendError(res, 400, absl::StrCat("\"", *root, "\" is not a directory"));
  std::vector<json> items;
  bool truncated = false;
  std::vector<std::pair<std::string, int>> pending;
  if (depth > 0) pending.emplace_back(*root, 1);
  while (!pending.empty() && !truncated) {
    auto [dir, level] = pending.back();
    pending.pop_back();
    absl::StatusOr<std::vector<FileInfo>> entries = backend_->List(record->id, dir);
    if (!entries.ok()) {
      if (dir == *root) return SendStatus(res, entries.status());
      continue;  // Removed while we walked.
    }
    for (const FileInfo& entry : *entries) {
      if (items.size() >= options_.max_list_entries) {
        truncated = true;
        break;
      }
      items.push_back(FileInfoJson(entry));
      if (entry.is_dir && level < depth) pending.emplace_back(entry.path, level + 1);
    }
  }
  // The spec's order: lexical by name within a directory, descendants right after their
  // parent. Sorting paths with '/' as the smallest byte gives exactly that.
  auto key = [](const json& item) {
    std::string path = item["path"].get<std::string>();
    std::replace(path.begin(), path.end(), '/', '\x01');
    return path;
  };
  std::sort(items.begin(), items.end(),
            [&](const json& a, const json& b) { return key(a) < key(b); });
  if (truncated) res.set_header("X-Moat-Truncated", "true");
  SendJson(res, json(items));
}

void ExecdApi::Upload(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
  if (!record.ok()) return SendStatus(res, record.status());
  if (!req.is_multipart_form_data()) {
    return SendError(res, 400,
                     "send multipart/form-data: a \"metadata\" part ({\"path\": ...}) before each "
                     "\"file\" part");
  }
  // multimap keeps parts of one name in the order sent: the i-th metadata goes with the i-th
  // file.
  auto [meta_begin, meta_end] = req.files.equal_range("metadata");
  auto [file_begin, file_end] = req.files.equal_range("file");
  size_t metas = std::distance(meta_begin, meta_end);
  size_t files = std::distance(file_begin, file_end);
  if (metas == 0 || metas != files) {
    return SendError(res, 400,
                     absl::StrCat("got ", metas, " \"metadata\" parts and ", files,
                                  " \"file\" parts; send one metadata part per file"));
  }
  uint64_t total = 0;
  struct Item {
    std::string path;
    uint32_t mode;
    const std::string* data;
  };
  std::vector<Item> items;
  for (auto meta = meta_begin, file = file_begin; meta != meta_end; ++meta, ++file) {
    absl::StatusOr<json> doc = ParseBody(meta->second.content);
    if (!doc.ok()) return SendStatus(res, doc.status());
    if (!doc->is_object() || !doc->contains("path") || !(*doc)["path"].is_string()) {
      return SendError(res, 400, "each metadata part must be {\"path\": \"/workspace/...\"}");
    }
    absl::StatusOr<std::string> path = SandboxPath((*doc)["path"].get<std::string>(), record->env);
    if (!path.ok()) return SendStatus(res, path.status());
    uint32_t mode = 0644;
    if (doc->contains("mode") && !(*doc)["mode"].is_null()) {
      absl::StatusOr<uint32_t> m = ModeFromDigits((*doc)["mode"]);
      if (!m.ok()) return SendStatus(res, m.status());
      mode = *m;
    }
    total += file->second.content.size();
    if (total > options_.max_upload_bytes) {
      return SendError(res, 413,
                       absl::StrCat("the upload is larger than ", options_.max_upload_bytes,
                                    " bytes (the agent's upload limit); send less per request"));
    }
    items.push_back(Item{*path, mode, &file->second.content});
  }
  for (const Item& item : items) {
    if (absl::Status s = backend_->WriteFile(record->id, item.path, *item.data, item.mode);
        !s.ok()) {
      return SendStatus(res, s);
    }
  }
  res.status = 200;
}

void ExecdApi::Download(const httplib::Request& req, httplib::Response& res) {
  // httplib applies a Range itself, to any response (error bodies too) and without checking it
  // against the size; we answer ranges here (206 or 416) and take the request's parsed ranges
  // away so that it does not apply them as well.
  const_cast<httplib::Request&>(req).ranges.clear();  // NOLINT: see above.
  absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
  if (!record.ok()) return SendStatus(res, record.status());
  if (!req.has_param("path")) return SendError(res, 400, "give the file: ?path=");
  absl::StatusOr<std::string> path = SandboxPath(req.get_param_value("path"), record->env);
  if (!path.ok()) return SendStatus(res, path.status());
  // Opened once: every piece below is read from this descriptor, never by path again, so a
  // file swapped or renamed meanwhile cannot mix two files into one answer.
  absl::StatusOr<OpenedFile> opened = backend_->OpenFile(record->id, *path);
  if (!opened.ok()) {
    if (absl::IsFailedPrecondition(opened.status())) {
      return SendError(res, 400, opened.status().message());
    }
    return SendStatus(res, opened.status());
  }
  auto file = std::make_shared<UniqueFd>(std::move(opened->fd));
  const FileInfo* info = &opened->info;
  bool ranged = req.has_header("Range");
  uint64_t first = 0, length = info->size;
  if (req.has_param("offset") || req.has_param("limit")) {
    if (ranged) return SendError(res, 400, "give a Range header or offset/limit, not both");
    // Line-based reading: lines [offset, offset + limit), 1-based, as text.
    uint64_t offset = 1, limit = UINT64_MAX;
    if ((req.has_param("offset") &&
         (!absl::SimpleAtoi(req.get_param_value("offset"), &offset) || offset < 1)) ||
        (req.has_param("limit") &&
         (!absl::SimpleAtoi(req.get_param_value("limit"), &limit) || limit < 1))) {
      return SendError(res, 400, "\"offset\" and \"limit\" must be whole numbers, 1 or more");
    }
    std::string out;
    uint64_t line = 1;
    for (uint64_t pos = 0; pos < info->size && line < offset + limit;) {
      absl::StatusOr<std::string> piece = ReadAt(file->get(), pos, options_.download_piece_bytes);
      if (!piece.ok()) return SendStatus(res, piece.status());
      if (piece->empty()) break;
      pos += piece->size();
      for (char c : *piece) {
        if (line >= offset && line < offset + limit) out += c;
        if (c == '\n') ++line;
      }
      if (out.size() > options_.max_replace_file_bytes) {
        return SendError(res, 413, "the requested lines are too large; ask for fewer");
      }
    }
    res.status = 200;
    res.set_content(out, "text/plain; charset=utf-8");
    return;
  }
  if (ranged) {
    std::optional<std::pair<uint64_t, uint64_t>> range =
        ParseRange(req.get_header_value("Range"), info->size);
    if (!range.has_value()) {
      res.set_header("Content-Range", absl::StrCat("bytes */", info->size));
      return SendError(
          res, 416,
          absl::StrCat("the Range \"", req.get_header_value("Range"), "\" does not fit the file's ",
                       info->size, " bytes; give one range bytes=first-last within it"),
          "RANGE_NOT_SATISFIABLE");
    }
    first = range->first;
    length = range->second - range->first + 1;
    res.status = 206;
    res.set_header("Content-Range",
                   absl::StrCat("bytes ", range->first, "-", range->second, "/", info->size));
  } else {
    res.status = 200;
  }
  res.set_header("Accept-Ranges", "bytes");
  res.set_header(
      "Content-Disposition",
      absl::StrCat("attachment; filename=\"",
                   absl::StrReplaceAll(BaseName(*path), {{"\"", "_"}, {"\\", "_"}}), "\""));
  if (length == 0) {
    res.set_content("", "application/octet-stream");
    return;
  }
  uint64_t piece_bytes = options_.download_piece_bytes;
  // Pieces of at most piece_bytes, read when httplib asks: a big file is never in memory.
  res.set_content_provider(
      length, "application/octet-stream",
      [file, first, piece_bytes](size_t offset, size_t want, httplib::DataSink& sink) {
        absl::StatusOr<std::string> piece =
            ReadAt(file->get(), first + offset, std::min<uint64_t>(want, piece_bytes));
        // The file shrank or went away: the response cannot be completed;
        // abort it.
        if (!piece.ok() || piece->empty()) return false;
        return sink.write(piece->data(), piece->size());
      });
}

void ExecdApi::Replace(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<SandboxRecord> record = UsableSandbox(*registry_, req);
  if (!record.ok()) return SendStatus(res, record.status());
  absl::StatusOr<json> doc = ParseBody(req.body);
  if (!doc.ok()) return SendStatus(res, doc.status());
  if (!doc->is_object() || doc->empty() || doc->size() > kMaxPathsPerRequest) {
    return SendError(res, 400,
                     "the body must be an object of path -> {\"old\": text, \"new\": text}");
  }
  struct Item {
    std::string key, path, from, to;
  };
  std::vector<Item> items;
  for (const auto& [key, item] : doc->items()) {
    if (!item.is_object() || !item.contains("old") || !item.contains("new") ||
        !item["old"].is_string() || !item["new"].is_string() ||
        item["old"].get_ref<const std::string&>().empty()) {
      return SendError(res, 400,
                       absl::StrCat("\"", key,
                                    "\" must map to {\"old\": non-empty text, \"new\": "
                                    "text}"));
    }
    absl::StatusOr<std::string> path = SandboxPath(key, record->env);
    if (!path.ok()) return SendStatus(res, path.status());
    items.push_back({key, *path, item["old"].get<std::string>(), item["new"].get<std::string>()});
  }
  json counts = json::object();
  for (const Item& item : items) {
    absl::StatusOr<OpenedFile> opened = backend_->OpenFile(record->id, item.path);
    if (!opened.ok()) {
      if (absl::IsFailedPrecondition(opened.status())) {
        return SendError(res, 400, opened.status().message());
      }
      return SendStatus(res, opened.status());
    }
    const FileInfo* info = &opened->info;
    if (info->size > options_.max_replace_file_bytes) {
      return SendError(
          res, 413,
          absl::StrCat("\"", item.key, "\" is larger than ", options_.max_replace_file_bytes,
                       " bytes, the limit for /files/replace"));
    }
    std::string data;
    while (data.size() < info->size) {
      absl::StatusOr<std::string> piece =
          ReadAt(opened->fd.get(), data.size(), options_.download_piece_bytes);
      if (!piece.ok()) return SendStatus(res, piece.status());
      if (piece->empty()) break;
      data += *piece;
    }
    int count = 0;
    std::string replaced;
    size_t at = 0;
    for (size_t hit; (hit = data.find(item.from, at)) != std::string::npos;
         at = hit + item.from.size()) {
      replaced.append(data, at, hit - at).append(item.to);
      ++count;
    }
    replaced.append(data, at, std::string::npos);
    if (count > 0) {
      if (absl::Status s = backend_->WriteFile(record->id, item.path, replaced, info->mode);
          !s.ok()) {
        return SendStatus(res, s);
      }
    }
    counts[item.key] = {{"replacedCount", count}};
  }
  if (req.get_param_value("verbose") == "true") return SendJson(res, counts);
  res.status = 200;
}

}  // namespace moat::agent
