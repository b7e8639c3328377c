// The end-to-end harness: runs the real `moat` binary as a separate process, with an environment
// the test controls, and gives the tests what they need to check the host afterwards.
//
// Everything a sandbox must be able to see (attack programs, temporary directories, planted
// files) lives under one scratch root that the harness checks is visible inside the sandbox
// before any test runs: a suite whose files are invisible to the sandbox would pass vacuously.
// The scratch root is $MOAT_E2E_SCRATCH, else `<build>/e2e-scratch`; it must not be under /tmp,
// /run, /var/tmp, /root or a home, which the sandbox replaces or hides.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "e2e/time_scale.h"

namespace moat::e2e {

// Prepares the scratch root and the attack programs once per process; returns an error message
// if the suite cannot run (not root, moat missing, scratch not visible inside), else "".
const std::string& SuiteSetupError();

// The path of the moat binary ($MOAT_BIN, else the one this suite was built with).
const std::string& MoatBinary();

// $MOAT_E2E_ROOTLESS=1: the suite runs as an ordinary user (in a delegated cgroup scope, e.g.
// `systemd-run --user --scope -p Delegate=yes e2e_project_config_test`), and so does every moat
// it starts; without it the suite needs root.
bool Rootless();
// The sandbox's root on the host: nobody (65534) under root, the user itself rootless. The
// owner a writable host directory needs for the sandbox to write without an idmap.
uid_t SandboxHostUid();
gid_t SandboxHostGid();

// The path, visible inside the sandbox, of the attack program `name` (e2e/run/attacks/<name>.c).
std::string Attack(absl::string_view name);

// A string no other test (or concurrent run of the suite) uses: "<prefix>-<pid>-<n>-<random>".
std::string UniqueMarker(absl::string_view prefix);
// Digits only, unique likewise: for markers that must also be numbers (`sleep 300.<digits>`).
std::string UniqueDigits();

// A fresh directory under the scratch root (mode 0755, so the sandbox's unprivileged host uid can
// enter it), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/relative
  std::string Path(absl::string_view relative) const;

 private:
  std::string path_;
};

// The fixture of every e2e test: skips without root, fails if the suite cannot run, and gives each
// test its own scratch directory.
class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override;
  TempDir& dir() { return *dir_; }

 private:
  std::unique_ptr<TempDir> dir_;
};

// ---- Host file helpers (fail the current test on error). ----
void WriteFile(const std::string& path, absl::string_view content, mode_t mode = 0644);
std::string ReadFile(const std::string& path);
bool PathExists(const std::string& path);  // lstat: a dangling symlink exists
void MakeDirs(const std::string& path, mode_t mode = 0755);
void RemoveTree(const std::string& path);

// ---- Running moat. ----

struct MoatOptions {
  // The moat binary to run; empty: MoatBinary(). Tests that run moat as another user give
  // Attack("moat"), the copy in the scratch directory (the checkout may sit under a home that
  // user cannot enter, such as /root).
  std::string binary;
  // The whole environment moat gets besides PATH and HOME: "NAME=VALUE" entries.
  std::vector<std::string> env;
  // HOME for moat; empty: an empty fake home under the scratch root (never the real one).
  std::string home;
  // Working directory of moat; empty: the scratch root.
  std::string cwd;
  // Descriptors moat inherits as they are (the harness clears their close-on-exec flag).
  std::vector<int> inherit_fds;
  // If set, moat's stdin/stdout/stderr; otherwise stdin is /dev/null and output is captured.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // The harness kills moat (SIGKILL) after this long and fails the test: a hung moat is a bug.
  // Multiplied by HangScale() (e2e/time_scale.h).
  double kill_after_seconds = 30;
  // Runs in the child just before moat is executed (e.g. to change its mount namespace); if it
  // returns false the child exits with status 126.
  std::function<bool()> before_exec;
};

struct MoatResult {
  pid_t pid = -1;
  int exit_code = -1;  // -1 if moat was killed by a signal
  int term_signal = 0;
  bool killed_by_harness = false;
  std::string out;  // captured stdout (raw bytes)
  std::string err;  // captured stderr
  double seconds = 0;
  struct rusage usage = {};  // of moat itself (its children are not waited for by moat's parent)
};

// A moat process running in the background.
class MoatProcess {
 public:
  MoatProcess(std::vector<std::string> args, MoatOptions options);
  ~MoatProcess();  // kills and reaps if still running
  MoatProcess(const MoatProcess&) = delete;
  MoatProcess& operator=(const MoatProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Collects output until moat exits (or the harness deadline passes) and reaps it.
  MoatResult Wait();

 private:
  std::vector<std::string> args_;
  MoatOptions options_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  double started_ = 0;
  bool reaped_ = false;
};

// `moat <args...>` to completion.
MoatResult RunMoat(const std::vector<std::string>& args, const MoatOptions& options = {});

// `moat run <flags...> -- <command...>` without --json.
MoatResult RunPlain(const std::vector<std::string>& flags, const std::vector<std::string>& command,
                    const MoatOptions& options = {});

// `moat run --json <flags...> -- <command...>`. Fails the test (and returns a null json) unless
// moat exits 0 with one JSON object on stdout. `raw`, if given, receives the process result.
nlohmann::json RunJson(const std::vector<std::string>& flags,
                       const std::vector<std::string>& command, const MoatOptions& options = {},
                       MoatResult* raw = nullptr);

// `sh -c <script>` as a command vector.
std::vector<std::string> Sh(absl::string_view script);

// Describes a JSON result for failure messages (status, exit code, output, violations).
std::string Describe(const nlohmann::json& result);

// Whether `result.violations` has one of `kind` whose detail contains `detail_part`.
bool HasViolation(const nlohmann::json& result, absl::string_view kind,
                  absl::string_view detail_part);

// ---- Host processes and cgroups. ----

// Host pids whose command line contains `marker` in one of its arguments.
std::vector<pid_t> PidsWithMarker(absl::string_view marker);
bool ProcessAlive(pid_t pid);  // exists and is not a zombie
// The process's command line (arguments separated by NUL), or "" once it has exited: a pid
// found a moment ago may be gone (a shell's short-lived child), which is no test failure.
std::string CmdlineOf(pid_t pid);

// A `sleep` on the host, killed and reaped on destruction. Its argv carries a unique marker.
class HostSleeper {
 public:
  HostSleeper();
  ~HostSleeper();
  pid_t pid() const { return pid_; }
  const std::string& marker() const { return marker_; }

 private:
  pid_t pid_ = -1;
  std::string marker_;
};

// Cgroup directories under /sys/fs/cgroup/*/moat/ (and /sys/fs/cgroup/moat/) that belong to runs
// of moat process `moat_pid` (named "<pid>-<n>").
std::vector<std::string> CgroupDirsOf(pid_t moat_pid);

// Polls `done` every 10 ms for up to Scaled(seconds); returns its last value.
template <typename F>
bool Eventually(F done, double seconds);

double NowSeconds();

template <typename F>
bool Eventually(F done, double seconds) {
  double deadline = NowSeconds() + Scaled(seconds);
  while (true) {
    if (done()) return true;
    if (NowSeconds() >= deadline) return false;
    struct timespec ts = {0, 10 * 1000 * 1000};
    ::nanosleep(&ts, nullptr);
  }
}

}  // namespace moat::e2e
