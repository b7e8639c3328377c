#include "sandbox/netns/netns_prep.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "sandbox/netns/net.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

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

// Puts the calling thread back in the network namespace `own`.
void ReturnOrAbort(int own) {
  if (::setns(own, CLONE_NEWNET) != 0) {
    // This thread would go on working inside a sandbox's network namespace: not recoverable.
    std::perror("moat: return to the supervisor's network namespace (setns)");
    std::abort();
  }
}

}  // namespace

absl::StatusOr<PreparedNetwork> PrepareNetwork(bool with_sysfs) {
  UniqueFd own(::open(kThreadNetns, O_RDONLY | O_CLOEXEC));
  if (!own) return ErrnoStatus("network: open this thread's namespace");
  if (::unshare(CLONE_NEWNET) != 0) return ErrnoStatus("network: new namespace (unshare)");
  absl::StatusOr<PreparedNetwork> prepared = [&]() -> absl::StatusOr<PreparedNetwork> {
    PreparedNetwork net;
    net.netns.reset(::open(kThreadNetns, O_RDONLY | O_CLOEXEC));
    if (!net.netns) return ErrnoStatus("network: open the new namespace");
    RETURN_IF_ERROR(BringUpLoopbackInThisThread());
    if (with_sysfs) {
      ASSIGN_OR_RETURN(net.sysfs, DetachedSysfs());
    }
    return net;
  }();
  ReturnOrAbort(own.get());
  return prepared;
}

absl::StatusOr<PreparedNetwork> AdoptNetwork(UniqueFd netns) {
  UniqueFd own(::open(kThreadNetns, O_RDONLY | O_CLOEXEC));
  if (!own) return ErrnoStatus("network: open this thread's namespace");
  if (::setns(netns.get(), CLONE_NEWNET) != 0) {
    return ErrnoStatus("network: enter the pooled namespace (setns)");
  }
  absl::StatusOr<PreparedNetwork> adopted = [&]() -> absl::StatusOr<PreparedNetwork> {
    PreparedNetwork net;
    RETURN_IF_ERROR(BringUpLoopbackInThisThread());
    ASSIGN_OR_RETURN(net.sysfs, DetachedSysfs());
    net.netns = std::move(netns);
    return net;
  }();
  ReturnOrAbort(own.get());
  return adopted;
}

NetworkPreparation::NetworkPreparation(std::function<absl::StatusOr<PreparedNetwork>(bool)> prepare,
                                       std::function<void()> housekeeping, NetnsPool* pool)
    : prepare_(std::move(prepare)),
      housekeeping_(std::move(housekeeping)),
      pool_(pool),
      pooled_(pool != nullptr ? pool->Take() : absl::NotFoundError("no pool")),
      thread_([this] { Work(); }) {}

NetworkPreparation::~NetworkPreparation() {
  AllowRefill();
  thread_.Join();
}

void NetworkPreparation::AllowRefill() {
  absl::MutexLock lock(&mu_);
  refill_allowed_ = true;
}

void NetworkPreparation::Work() {
  bool for_take;
  {
    absl::MutexLock lock(&mu_);
    began_ = true;
    // Not when Take() went ahead without the thread (it then owns pooled_).
    for_take = !went_ahead_;
  }
  if (for_take) {
    // This run's: the pooled one (its sysfs mounted here, off the main thread), else a new one.
    Source source = Source::kPool;
    absl::StatusOr<PreparedNetwork> made =
        pooled_.ok() ? AdoptNetwork(*std::move(pooled_)) : absl::NotFoundError("none pooled");
    if (!made.ok()) {
      source = Source::kThread;
      made = prepare_(/*with_sysfs=*/true);
    }
    absl::MutexLock lock(&mu_);
    made_ = std::move(made);
    made_source_ = source;
  }
  if (pool_ != nullptr) {
    // The next run's: made once this sandbox is in its cgroup (AllowRefill), so that the kernel
    // work does not compete with the cgroup move, which waits for RCU grace periods.
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&refill_allowed_));
    }
    absl::StatusOr<PreparedNetwork> next = prepare_(/*with_sysfs=*/false);
    if (next.ok()) pool_->Add(next->netns.get()).IgnoreError();
  }
  if (housekeeping_) housekeeping_();
}

absl::StatusOr<PreparedNetwork> NetworkPreparation::Take() {
  if (taken_) return absl::FailedPreconditionError("the prepared network was already taken");
  taken_ = true;
  {
    absl::MutexLock lock(&mu_);
    if (began_) {
      mu_.Await(absl::Condition(
          +[](std::optional<absl::StatusOr<PreparedNetwork>>* made) { return made->has_value(); },
          &made_));
      if (made_->ok()) source_ = made_source_;
      return *std::move(made_);
    }
    went_ahead_ = true;  // the thread will not touch pooled_ now
  }
  if (pooled_.ok()) {
    // A pooled namespace that cannot be adopted is dropped, and clone3 makes one.
    absl::StatusOr<PreparedNetwork> adopted = AdoptNetwork(*std::move(pooled_));
    if (adopted.ok()) source_ = Source::kPool;
    return adopted;
  }
  return absl::UnavailableError("the network thread had not started; clone3 makes the namespace");
}

}  // namespace moat::sandbox
