#include "sandbox/netns_prep.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "sandbox/net.h"
#include "sandbox/util/errno_status.h"
#include "sandbox/util/status_macros.h"

namespace moat::sandbox {
namespace {

constexpr char kThreadNetns[] = "/proc/thread-self/ns/net";

// A new sysfs instance shows the network devices of the mounting thread's namespace.
absl::StatusOr<UniqueFd> DetachedSysfs() {
  UniqueFd context(::fsopen("sysfs", FSOPEN_CLOEXEC));
  if (!context) return ErrnoStatus("network: fsopen sysfs");
  // As mount(2) with MS_RDONLY would: a read-only superblock, named "sysfs" in mountinfo.
  if (::fsconfig(context.get(), FSCONFIG_SET_STRING, "source", "sysfs", 0) != 0 ||
      ::fsconfig(context.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0 ||
      ::fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return ErrnoStatus("network: create a sysfs for the sandbox");
  }
  UniqueFd mount(
      ::fsmount(context.get(), FSMOUNT_CLOEXEC,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC));
  if (!mount) return ErrnoStatus("network: fsmount sysfs");
  return mount;
}

}  // namespace

absl::StatusOr<PreparedNetwork> PrepareNetwork() {
  UniqueFd own(::open(kThreadNetns, O_RDONLY | O_CLOEXEC));
  if (!own) return ErrnoStatus("network: open this thread's namespace");
  if (::unshare(CLONE_NEWNET) != 0) return ErrnoStatus("network: new namespace (unshare)");
  absl::StatusOr<PreparedNetwork> prepared = [&]() -> absl::StatusOr<PreparedNetwork> {
    PreparedNetwork net;
    net.netns.reset(::open(kThreadNetns, O_RDONLY | O_CLOEXEC));
    if (!net.netns) return ErrnoStatus("network: open the new namespace");
    RETURN_IF_ERROR(BringUpLoopbackInThisThread());
    ASSIGN_OR_RETURN(net.sysfs, DetachedSysfs());
    return net;
  }();
  if (::setns(own.get(), CLONE_NEWNET) != 0) {
    // This thread would go on working inside a sandbox's network namespace: not recoverable.
    std::perror("moat: return to the supervisor's network namespace (setns)");
    std::abort();
  }
  return prepared;
}

NetworkPreparation::NetworkPreparation(std::function<absl::StatusOr<PreparedNetwork>()> prepare,
                                       std::function<void()> then)
    : thread_([this, prepare = std::move(prepare), then = std::move(then)] {
        if (!claimed_.exchange(true)) promise_.set_value(prepare());
        if (then) then();
      }) {}

NetworkPreparation::~NetworkPreparation() {
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<PreparedNetwork> NetworkPreparation::Take() {
  if (!future_.valid()) {
    return absl::FailedPreconditionError("the prepared network was already taken");
  }
  if (!claimed_.exchange(true)) {
    future_ = {};
    return absl::UnavailableError("the network thread had not started; clone3 makes the namespace");
  }
  return future_.get();
}

}  // namespace moat::sandbox
