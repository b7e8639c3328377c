#include "node-agent/backend/namespace_ref.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/errno_status.h"

namespace moat::agent {

absl::StatusOr<NamespaceRef> NamespaceRef::Of(pid_t pid, absl::string_view type) {
  const std::string path = absl::StrCat("/proc/", pid, "/ns/", type);
  NamespaceRef ref;
  ref.fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ref.fd_) return ErrnoStatus(absl::StrCat("open \"", path, "\""));
  struct stat st;
  if (::fstat(ref.fd_.get(), &st) != 0) {
    return ErrnoStatus(absl::StrCat("stat \"", path, "\""));
  }
  ref.type_ = std::string(type);
  ref.dev_ = st.st_dev;
  ref.ino_ = st.st_ino;
  return ref;
}

std::vector<pid_t> NamespaceRef::Members() const {
  std::vector<pid_t> found;
  if (!fd_) return found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (struct dirent* e = ::readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    struct stat st;
    // A process that exits meanwhile is simply not in it.
    if (::stat(absl::StrCat("/proc/", pid, "/ns/", type_).c_str(), &st) != 0) continue;
    if (st.st_dev == dev_ && st.st_ino == ino_) found.push_back(pid);
  }
  ::closedir(proc);
  return found;
}

}  // namespace moat::agent
