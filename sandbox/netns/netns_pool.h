// Network namespaces made ahead for later sandboxes, each handed to exactly one of them.
//
// Why: making a network namespace is the slowest kernel step of a sandbox's start (0.4-0.5 ms
// here, and more while the previous sandbox's namespace is being torn down, which holds the same
// lock). A run takes a namespace an earlier run made (~0.05 ms) and makes the next one on a side
// thread while its own sandbox starts (netns_prep.h), so the cost leaves the critical path.
//
// The pool is a directory, root's and mode 0700, that is a private mount of itself (nothing
// mounted in it propagates to other mount namespaces). Each waiting namespace is a file named
// "<pid of its maker>-<random>" with the namespace (nsfs) bound on it, as `ip netns add` pins
// one. Nothing else survives a run: a namespace is made fresh (lo up, nothing else), owned by the
// host's user namespace (so no sandbox can ever configure it), waits unused, and is used once.
//
// Single use: Take() claims an entry by unmounting it, which only one process can do, and names
// are never reused, so no two sandboxes (concurrent or not) ever share a namespace. Anything in
// the directory that is not a network namespace owned by this process's user namespace is
// skipped. No daemon: the namespaces are only kernel objects pinned by mounts, gone at reboot;
// `umount /run/moat/netns/*` frees them.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "util/unique_fd.h"

namespace moat::sandbox {

class NetnsPool {
 public:
  static constexpr char kDefaultDir[] = "/run/moat/netns";

  // `dir` need not exist yet (Add creates it). At most `capacity` namespaces wait in it.
  NetnsPool(std::string dir, int capacity) : dir_(std::move(dir)), capacity_(capacity) {}

  // A namespace from the pool, now this caller's alone; NotFound when none waits.
  absl::StatusOr<UniqueFd> Take();

  // Puts `netns_fd` (a network namespace this process made and nobody has used) in the pool;
  // false when it already holds `capacity` (the namespace is then not kept). Creates the
  // directory on first use and removes entries that processes which died mid-way left empty.
  absl::StatusOr<bool> Add(int netns_fd);

  const std::string& dir() const { return dir_; }

 private:
  // Creates the directory as a private mount of itself if it is not one yet; checks its owner
  // and mode, and that it is private, every time. Returns the directory, opened through its
  // mount.
  absl::StatusOr<UniqueFd> Prepare();

  std::string dir_;
  int capacity_;
};

}  // namespace moat::sandbox
