#include "bench/timed_run.h"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "util/errno_status.h"
#include "util/unique_fd.h"

extern char** environ;

namespace moat::bench {
namespace {

constexpr size_t kMaxOutput = 64 * 1024;

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

std::string NameOf(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// Posix_spawn file actions: stdin from /dev/null, stdout and stderr into `output_fd`.
class FileActions {
 public:
  explicit FileActions(int output_fd) {
    posix_spawn_file_actions_init(&actions_);
    posix_spawn_file_actions_addopen(&actions_, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions_, output_fd, 1);
    posix_spawn_file_actions_adddup2(&actions_, output_fd, 2);
  }
  ~FileActions() { posix_spawn_file_actions_destroy(&actions_); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
  const posix_spawn_file_actions_t* get() const { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

// Joins a mount namespace for the span of one run and returns to the original one after it.
// setns into a mount namespace also moves the root and working directory to that namespace's
// root, so the working directory is restored explicitly.
class MountNamespaceVisit {
 public:
  static absl::StatusOr<MountNamespaceVisit> Enter(int target_fd) {
    MountNamespaceVisit visit;
    visit.home_.reset(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
    if (!visit.home_) return ErrnoStatus("open \"/proc/self/ns/mnt\" (the bench's own namespace)");
    visit.cwd_.reset(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!visit.cwd_) return ErrnoStatus("open the working directory");
    if (::setns(target_fd, CLONE_NEWNS) != 0) {
      return ErrnoStatus("setns into the prepared mount namespace (needs root, one thread)");
    }
    return visit;
  }
  absl::Status Leave() {
    if (::setns(home_.get(), CLONE_NEWNS) != 0) {
      return ErrnoStatus("setns back into the bench's own mount namespace");
    }
    if (::fchdir(cwd_.get()) != 0) return ErrnoStatus("restore the working directory");
    return absl::OkStatus();
  }

 private:
  UniqueFd home_;
  UniqueFd cwd_;
};

std::string ReadAll(int fd) {
  std::string out(kMaxOutput, '\0');
  ssize_t n;
  do {
    n = ::pread(fd, out.data(), out.size(), 0);
  } while (n < 0 && errno == EINTR);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

}  // namespace

absl::StatusOr<RunOutcome> TimedRun(const RunSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("TimedRun: empty argv");
  UniqueFd output(::memfd_create("moat-bench-output", MFD_CLOEXEC));
  if (!output) return ErrnoStatus("memfd_create for the command's output");
  FileActions actions(output.get());
  std::vector<char*> argv = CStrings(spec.argv);
  std::vector<char*> envp = CStrings(spec.env);

  std::optional<MountNamespaceVisit> visit;
  if (spec.mount_ns_fd >= 0) {
    absl::StatusOr<MountNamespaceVisit> entered = MountNamespaceVisit::Enter(spec.mount_ns_fd);
    if (!entered.ok()) return entered.status();
    visit = std::move(*entered);
  }

  RunOutcome outcome;
  pid_t pid = -1;
  const auto start = std::chrono::steady_clock::now();
  const int spawn_error =
      ::posix_spawn(&pid, argv[0], actions.get(), nullptr, argv.data(), envp.data());
  int wait_result = -1;
  int wait_errno = 0;
  if (spawn_error == 0) {
    do {
      wait_result = ::waitpid(pid, &outcome.wait_status, 0);
    } while (wait_result < 0 && errno == EINTR);
    if (wait_result < 0) wait_errno = errno;
  }
  const auto end = std::chrono::steady_clock::now();

  if (visit) {
    absl::Status left = visit->Leave();
    if (!left.ok()) return left;
  }
  if (spawn_error != 0) {
    return ErrnoStatus(absl::StrCat("posix_spawn \"", spec.argv[0], "\""), spawn_error);
  }
  if (wait_result < 0) {
    return ErrnoStatus(absl::StrCat("waitpid for \"", spec.argv[0], "\""), wait_errno);
  }
  outcome.elapsed = absl::FromChrono(end - start);
  outcome.output = ReadAll(output.get());
  struct stat st {};
  if (::fstat(output.get(), &st) == 0) outcome.output_bytes = static_cast<uint64_t>(st.st_size);
  return outcome;
}

bool Succeeded(const RunOutcome& outcome) {
  return WIFEXITED(outcome.wait_status) && WEXITSTATUS(outcome.wait_status) == 0;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrFormat("killed by signal %d (%s)", WTERMSIG(wait_status),
                           ::strsignal(WTERMSIG(wait_status)));
  }
  return absl::StrFormat("wait status 0x%x", wait_status);
}

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::vector<std::string> CurrentEnvironment(const std::vector<std::string>& drop,
                                            const std::vector<std::string>& add) {
  std::vector<std::string> names = drop;
  for (const std::string& entry : add) names.push_back(NameOf(entry));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (std::find(names.begin(), names.end(), NameOf(entry)) == names.end()) env.push_back(entry);
  }
  env.insert(env.end(), add.begin(), add.end());
  return env;
}

}  // namespace moat::bench
