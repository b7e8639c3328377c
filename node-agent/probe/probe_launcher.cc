#include "node-agent/probe/probe_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/errno_status.h"
#include "util/self_path.h"
#include "util/unique_fd.h"

extern char** environ;

namespace moat::agent {
namespace {

constexpr int kPidfdFd = 3;
constexpr int kReportFd = 4;
constexpr int kSeccompFd = 5;

std::string FormatInterval(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d), "ms");
}

}  // namespace

ProbeLauncher::~ProbeLauncher() {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, pid] : probes_) ids.push_back(id);
  }
  for (const std::string& id : ids) Stop(id);
}

std::string ProbeLauncher::DefaultBinary() { return BesideThisProgram("moat-probe"); }

absl::Status ProbeLauncher::Start(const std::string& id, sandbox::LiveSandbox& box,
                                  const sandbox::Limits& limits) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoStatus("create the probe's report pipe");
  UniqueFd report_read(pipe_fds[0]), report_write(pipe_fds[1]);
  UniqueFd listener = box.TakeSeccompListener();

  std::vector<std::string> args = {
      binary_,
      absl::StrCat("--sandbox-id=", id),
      absl::StrCat("--pidfd-fd=", kPidfdFd),
      absl::StrCat("--report-fd=", kReportFd),
      absl::StrCat("--interval=", FormatInterval(interval_)),
      "--expected-mounts-from-start",
  };
  if (listener) {
    args.push_back(absl::StrCat("--seccomp-fd=", kSeccompFd));
    args.push_back(absl::StrCat("--arch=", sandbox::ArchName(box.seccomp_arch())));
  }
  for (const std::string& dir : box.cgroup().paths()) {
    args.push_back(absl::StrCat("--cgroup-dir=", dir));
  }
  if (limits.memory_bytes > 0) args.push_back(absl::StrCat("--memory-max=", limits.memory_bytes));
  if (limits.pids > 0) args.push_back(absl::StrCat("--pids-max=", limits.pids));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // dup2 onto 3, 4, 5 clears close-on-exec on the copies; everything else stays CLOEXEC. The
  // sources are first moved above 5, so that no dup2 overwrites a source not yet copied.
  auto high = [](int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, kSeccompFd + 1)); };
  UniqueFd pidfd = high(box.pidfd());
  UniqueFd report = high(report_write.get());
  UniqueFd seccomp = listener ? high(listener.get()) : UniqueFd();
  if (!pidfd || !report || (listener && !seccomp)) {
    return ErrnoStatus("prepare the probe's descriptors");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pidfd.get(), kPidfdFd);
  posix_spawn_file_actions_adddup2(&actions, report.get(), kReportFd);
  if (seccomp) posix_spawn_file_actions_adddup2(&actions, seccomp.get(), kSeccompFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  int error = ::posix_spawn(&pid, binary_.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (error != 0) {
    return absl::Status(
        ErrnoToCode(error),
        absl::StrCat("start the sandbox's probe \"", binary_, "\": ", std::strerror(error),
                     " (install moat-probe next to moat-agent, or set probe.binary)"));
  }
  report_write.reset();  // the probe holds the only write end: EOF when it dies
  report.reset();
  absl::Status watched = monitor_->Watch(id, std::move(report_read), pid);
  if (!watched.ok()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return watched;
  }
  absl::MutexLock lock(&mu_);
  probes_[id] = pid;
  return absl::OkStatus();
}

void ProbeLauncher::Stop(const std::string& id) {
  pid_t pid = -1;
  {
    absl::MutexLock lock(&mu_);
    auto it = probes_.find(id);
    if (it == probes_.end()) return;
    pid = it->second;
    probes_.erase(it);
  }
  monitor_->Forget(id);
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void ProbeLauncher::ReleaseAll() {
  std::map<std::string, pid_t> probes;
  {
    absl::MutexLock lock(&mu_);
    probes.swap(probes_);
  }
  for (const auto& [id, pid] : probes) monitor_->Forget(id);
}

pid_t ProbeLauncher::ProbePid(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = probes_.find(id);
  return it == probes_.end() ? -1 : it->second;
}

}  // namespace moat::agent
