// KernelBackend's file methods: each resolves the sandbox's root descriptor (/proc/<init>/root)
// and hands the work to WorkspaceFiles, which resolves every path inside it as the kernel would
// for the sandbox and never leaves it (workspace_files.h).
#include <sys/fsuid.h>

#include "node-agent/backend/kernel_backend.h"
#include "node-agent/backend/workspace_files.h"
#include "util/status_macros.h"

namespace moat::agent {

// Each method works on a copy of the sandbox's root descriptor (RootOf).
namespace {

// The calling thread's file-system ids become the sandbox root's host ids for the operation.
// The workspace is a tmpfs of the sandbox's user namespace: the kernel refuses to create files
// there for an id it does not map (EOVERFLOW for host root), and with a non-zero fsuid this
// thread also loses its capabilities over files, so the sandbox's permissions apply to us too.
// setfsuid is per thread (glibc does not broadcast it to the other threads).
class AsSandboxOwner {
 public:
  AsSandboxOwner(uid_t uid, gid_t gid) {
    ::setfsgid(gid);
    ::setfsuid(uid);
  }
  ~AsSandboxOwner() {
    ::setfsuid(0);
    ::setfsgid(0);
  }
  AsSandboxOwner(const AsSandboxOwner&) = delete;
  AsSandboxOwner& operator=(const AsSandboxOwner&) = delete;
};

}  // namespace

#define MOAT_WITH_FILES(id, files)                                                            \
  ASSIGN_OR_RETURN(UniqueFd root_fd, RootOf((id)));                                           \
  AsSandboxOwner as_owner(factory_->ids().host_uid, factory_->ids().host_gid);                \
  WorkspaceFiles files = WorkspaceFiles::SandboxRoot(root_fd.get(), factory_->ids().host_uid, \
                                                     factory_->ids().host_gid)

absl::StatusOr<std::string> KernelBackend::ReadFile(absl::string_view id, absl::string_view path,
                                                    uint64_t offset, uint64_t length) {
  MOAT_WITH_FILES(id, files);
  return files.ReadFile(path, offset, length);
}

absl::StatusOr<OpenedFile> KernelBackend::OpenFile(absl::string_view id, absl::string_view path) {
  MOAT_WITH_FILES(id, files);
  return files.OpenRead(path);
}

absl::Status KernelBackend::WriteFile(absl::string_view id, absl::string_view path,
                                      absl::string_view data, uint32_t mode) {
  MOAT_WITH_FILES(id, files);
  return files.WriteFile(path, data, mode);
}

absl::StatusOr<FileInfo> KernelBackend::Stat(absl::string_view id, absl::string_view path) {
  MOAT_WITH_FILES(id, files);
  return files.Stat(path);
}

absl::StatusOr<std::vector<FileInfo>> KernelBackend::List(absl::string_view id,
                                                          absl::string_view path) {
  MOAT_WITH_FILES(id, files);
  return files.List(path);
}

absl::Status KernelBackend::MakeDirectory(absl::string_view id, absl::string_view path) {
  MOAT_WITH_FILES(id, files);
  return files.MakeDirectory(path);
}

absl::Status KernelBackend::Move(absl::string_view id, absl::string_view from,
                                 absl::string_view to) {
  MOAT_WITH_FILES(id, files);
  return files.Move(from, to);
}

absl::Status KernelBackend::SetMode(absl::string_view id, absl::string_view path, uint32_t mode) {
  MOAT_WITH_FILES(id, files);
  return files.SetMode(path, mode);
}

absl::Status KernelBackend::Remove(absl::string_view id, absl::string_view path) {
  MOAT_WITH_FILES(id, files);
  return files.Remove(path);
}

}  // namespace moat::agent
