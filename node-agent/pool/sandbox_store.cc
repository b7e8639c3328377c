#include "node-agent/pool/sandbox_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "sandbox/cgroup/cgroup_fs.h"
#include "util/errno_status.h"

namespace moat::agent {

absl::StatusOr<SandboxStore> SandboxStore::Open(std::string dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("create \"", dir, "\""));
  }
  return SandboxStore(std::move(dir));
}

std::string SandboxStore::PathOf(absl::string_view id) const {
  return absl::StrCat(dir_, "/", id, ".json");
}

absl::Status SandboxStore::Save(const SandboxRecord& r) const {
  if (!IsValidSandboxId(r.id)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid sandbox id \"", r.id, "\""));
  }
  nlohmann::json j = {{"version", 1},
                      {"id", r.id},
                      {"profile", r.profile},
                      {"created_ns", absl::ToUnixNanos(r.created)},
                      {"expires_ns", absl::ToUnixNanos(r.expires_at)},
                      {"metadata", r.metadata},
                      {"env", r.env},
                      {"cpus", r.limits.cpus},
                      {"memory", r.limits.memory_bytes},
                      {"pids", r.limits.pids},
                      {"workspace", r.limits.workspace_bytes},
                      {"warm", r.start_path == StartPath::kWarm},
                      {"token", r.token}};
  const std::string path = PathOf(r.id);
  const std::string tmp = absl::StrCat(path, ".tmp");
  const std::string text = j.dump() + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(absl::StrCat("create \"", tmp, "\""));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    ::unlink(tmp.c_str());
    errno = n < 0 ? write_errno : ENOSPC;
    return ErrnoStatus(absl::StrCat("write \"", tmp, "\""));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status error = ErrnoStatus(absl::StrCat("rename \"", tmp, "\" to \"", path, "\""));
    ::unlink(tmp.c_str());
    return error;
  }
  return absl::OkStatus();
}

absl::StatusOr<SandboxRecord> SandboxStore::Load(absl::string_view id) const {
  const std::string path = PathOf(id);
  if (::access(path.c_str(), F_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no record of sandbox ", id, " in \"", dir_, "\""));
  }
  absl::StatusOr<std::string> text = sandbox::cgroupfs::ReadFile(path);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || j.value("version", 0) != 1 || j.value("id", "") != id) {
    return absl::DataLossError(absl::StrCat("\"", path, "\" is not a sandbox record"));
  }
  try {
    SandboxRecord r;
    r.id = std::string(id);
    r.profile = j.at("profile").get<std::string>();
    r.state = SandboxState::kReady;
    r.created = absl::FromUnixNanos(j.at("created_ns").get<int64_t>());
    r.expires_at = absl::FromUnixNanos(j.at("expires_ns").get<int64_t>());
    r.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
    r.env = j.at("env").get<std::map<std::string, std::string>>();
    r.limits.cpus = j.at("cpus").get<double>();
    r.limits.memory_bytes = j.at("memory").get<uint64_t>();
    r.limits.pids = j.at("pids").get<uint64_t>();
    r.limits.workspace_bytes = j.at("workspace").get<uint64_t>();
    r.start_path = j.at("warm").get<bool>() ? StartPath::kWarm : StartPath::kCold;
    r.token = j.at("token").get<std::string>();
    if (r.token.empty()) return absl::DataLossError(absl::StrCat("\"", path, "\" has no token"));
    return r;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("\"", path, "\" is not a sandbox record: ", e.what()));
  }
}

std::vector<std::string> SandboxStore::Ids() const {
  std::vector<std::string> ids;
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      absl::string_view name = e->d_name;
      if (absl::ConsumeSuffix(&name, ".json") && IsValidSandboxId(name)) ids.emplace_back(name);
    }
    ::closedir(d);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

void SandboxStore::Remove(absl::string_view id) const { ::unlink(PathOf(id).c_str()); }

}  // namespace moat::agent
