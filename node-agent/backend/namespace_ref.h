// A held reference to one namespace of a process, to ask later which processes are still in it.
//
// Why a reference and not the inode number alone: nsfs numbers namespaces from a small id
// allocator that hands out the lowest free number, so the moment the last reference to a
// namespace goes, the next namespace made on the node (a new sandbox, `unshare -m`) takes its
// number. "Which processes have mount namespace 4026532178" asked after the sandbox's namespace
// is freed then finds the new sandbox's init. While the descriptor is held the namespace cannot
// be freed, so its (device, inode) pair names it and nothing else; Release lets it go once the
// question is answered.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "util/unique_fd.h"

namespace moat::agent {

class NamespaceRef {
 public:
  NamespaceRef() = default;  // Holds nothing; Members() is empty.
  // `type` is a name under /proc/<pid>/ns: "mnt", "pid", "net", ...
  static absl::StatusOr<NamespaceRef> Of(pid_t pid, absl::string_view type);

  NamespaceRef(NamespaceRef&&) = default;
  NamespaceRef& operator=(NamespaceRef&&) = default;

  bool held() const { return fd_.valid(); }
  // The processes of the host (this process's /proc) in this namespace now, in /proc order.
  // Empty if nothing is held.
  std::vector<pid_t> Members() const;
  // Lets the kernel free the namespace once nothing else uses it.
  void Release() { fd_.reset(); }

 private:
  UniqueFd fd_;
  std::string type_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace moat::agent
