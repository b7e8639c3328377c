#include "e2e/run/harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace moat::e2e {
namespace {

constexpr char kHostPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

uint64_t RandomNumber() {
  static std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(::getpid()) << 32));
  return rng();
}

int RemoveEntry(const char* path, const struct stat*, int type, struct FTW*) {
  if (type == FTW_DP) return ::rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
  return ::unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

// Removes `path` recursively without following symlinks or crossing into other mounts.
bool RemoveTreeQuietly(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  return ::nftw(path.c_str(), RemoveEntry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) == 0;
}

bool CopyExecutable(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  if (!in || !out) return false;
  out << in.rdbuf();
  out.close();
  return out.good() && ::chmod(to.c_str(), 0755) == 0;
}

// Per process: <scratch>/p<pid>-<random>/{bin,home}.
struct Suite {
  std::string error;
  std::string process_dir;
  std::string bin_dir;
  std::string home;
  std::string moat;
};

// Removes the directories of earlier runs whose process is gone (a crashed or killed suite).
void SweepStaleRuns(const std::string& scratch) {
  DIR* dir = ::opendir(scratch.c_str());
  if (dir == nullptr) return;
  while (struct dirent* e = ::readdir(dir)) {
    int pid = 0;
    if (std::sscanf(e->d_name, "p%d-", &pid) == 1 && pid > 0 && pid != ::getpid() &&
        ::kill(pid, 0) != 0 && errno == ESRCH) {
      RemoveTreeQuietly(absl::StrCat(scratch, "/", e->d_name));
    }
  }
  ::closedir(dir);
}

std::string PrepareSuite(Suite& s) {
  if (::geteuid() != 0 && !Rootless()) {
    return "the e2e suite needs root (moat run creates cgroups), or MOAT_E2E_ROOTLESS=1 in a "
           "delegated cgroup scope";
  }
  const char* bin = std::getenv("MOAT_BIN");
  s.moat = bin && *bin ? bin : MOAT_E2E_DEFAULT_BIN;
  if (::access(s.moat.c_str(), X_OK) != 0) {
    return Errno(absl::StrCat("moat binary \"", s.moat, "\" (set MOAT_BIN)"));
  }
  const char* env_scratch = std::getenv("MOAT_E2E_SCRATCH");
  std::string scratch = env_scratch && *env_scratch ? env_scratch : MOAT_E2E_DEFAULT_SCRATCH;
  auto under = [](absl::string_view path, absl::string_view tree) {
    return path == tree || absl::StartsWith(path, absl::StrCat(tree, "/"));
  };
  constexpr absl::string_view kPrivateTrees[] = {"/tmp",  "/run",  "/var/tmp",
                                                 "/root", "/home", "/dev"};
  if (env_scratch == nullptr || *env_scratch == '\0') {
    // A checkout under /tmp, /root or /home (CI may clone anywhere) builds where the sandbox
    // cannot see; then the scratch files go to a place it can.
    for (absl::string_view private_tree : kPrivateTrees) {
      if (under(scratch, private_tree)) scratch = "/var/lib/moat-e2e-scratch";
    }
  }
  for (absl::string_view private_tree : kPrivateTrees) {
    if (under(scratch, private_tree)) {
      return absl::StrCat("scratch directory \"", scratch, "\" is under ", private_tree,
                          ", which the sandbox replaces or hides; set MOAT_E2E_SCRATCH to a "
                          "directory under e.g. /srv or /work");
    }
  }
  if (::mkdir(scratch.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno(absl::StrCat("create scratch directory \"", scratch, "\""));
  }
  ::chmod(scratch.c_str(), 0755);
  SweepStaleRuns(scratch);
  s.process_dir = absl::StrCat(scratch, "/p", ::getpid(), "-", RandomNumber() % 1000000);
  s.bin_dir = s.process_dir + "/bin";
  s.home = s.process_dir + "/home";
  for (const std::string& d : {s.process_dir, s.bin_dir, s.home}) {
    if (::mkdir(d.c_str(), 0755) != 0) return Errno(absl::StrCat("mkdir \"", d, "\""));
    ::chmod(d.c_str(), 0755);
  }
  // The attack programs are copied next to the test's files: the build directory itself may be
  // somewhere the sandbox cannot see.
  DIR* dir = ::opendir(MOAT_E2E_ATTACK_DIR);
  if (dir == nullptr)
    return Errno(absl::StrCat("open attack directory \"", MOAT_E2E_ATTACK_DIR, "\""));
  int copied = 0;
  while (struct dirent* e = ::readdir(dir)) {
    std::string from = absl::StrCat(MOAT_E2E_ATTACK_DIR, "/", e->d_name);
    struct stat st;
    if (e->d_name[0] == '.' || ::stat(from.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
        !(st.st_mode & S_IXUSR)) {
      continue;
    }
    if (!CopyExecutable(from, absl::StrCat(s.bin_dir, "/", e->d_name))) {
      ::closedir(dir);
      return Errno(absl::StrCat("copy attack program \"", from, "\""));
    }
    ++copied;
  }
  ::closedir(dir);
  if (copied == 0) return absl::StrCat("no attack programs in \"", MOAT_E2E_ATTACK_DIR, "\"");
  // moat itself too (it is static), for the tests that run it inside a sandbox.
  if (!CopyExecutable(s.moat, absl::StrCat(s.bin_dir, "/moat"))) {
    return Errno(absl::StrCat("copy \"", s.moat, "\" into the scratch directory"));
  }
  return "";
}

Suite& TheSuite() {
  static Suite* suite = [] {
    auto* s = new Suite;
    s->error = PrepareSuite(*s);
    return s;
  }();
  return *suite;
}

// Removes this process's scratch directory when the tests are done.
class CleanupEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    Suite& s = TheSuite();
    if (!s.process_dir.empty()) RemoveTreeQuietly(s.process_dir);
  }
};
[[maybe_unused]] const auto* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new CleanupEnvironment);

// Proves that the sandbox sees the scratch directory: reads back a file and runs a program.
std::string ProbeVisibility() {
  Suite& s = TheSuite();
  std::string probe = s.process_dir + "/visibility-probe";
  std::string token = UniqueMarker("visible");
  {
    std::ofstream out(probe);
    out << token;
  }
  ::chmod(probe.c_str(), 0644);
  MoatOptions options;
  options.kill_after_seconds = 20;
  MoatResult r = RunMoat({"run", "--", Attack("id_probe")}, options);
  MoatResult cat = RunMoat({"run", "--", "/bin/cat", probe}, options);
  ::unlink(probe.c_str());
  if (r.exit_code != 0 || cat.exit_code != 0 || cat.out != token) {
    return absl::StrCat("the sandbox cannot see the scratch directory \"", s.process_dir,
                        "\" (attack program exit ", r.exit_code, ": ", r.err, "; cat exit ",
                        cat.exit_code, ": ", cat.err,
                        "). Set MOAT_E2E_SCRATCH to a directory every user can enter, outside "
                        "/tmp, /run and the homes.");
  }
  return "";
}

}  // namespace

const std::string& SuiteSetupError() {
  static const std::string* error = [] {
    Suite& s = TheSuite();
    if (!s.error.empty()) return new std::string(s.error);
    return new std::string(ProbeVisibility());
  }();
  return *error;
}

bool Rootless() {
  const char* value = std::getenv("MOAT_E2E_ROOTLESS");
  return value != nullptr && std::string(value) == "1" && ::geteuid() != 0;
}

uid_t SandboxHostUid() { return ::geteuid() == 0 ? 65534 : ::geteuid(); }
gid_t SandboxHostGid() { return ::geteuid() == 0 ? 65534 : ::getegid(); }

const std::string& MoatBinary() { return TheSuite().moat; }

std::string Attack(absl::string_view name) { return absl::StrCat(TheSuite().bin_dir, "/", name); }

std::string UniqueMarker(absl::string_view prefix) {
  static std::atomic<int> counter{0};
  return absl::StrCat(prefix, "-", ::getpid(), "-", counter++, "-", RandomNumber() % 1000000);
}

std::string UniqueDigits() {
  static std::atomic<int> counter{0};
  return absl::StrCat(::getpid(), counter++, 100000 + RandomNumber() % 900000);
}

double NowSeconds() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// ---- TempDir and files ----

TempDir::TempDir() {
  std::string tmpl = absl::StrCat(TheSuite().process_dir, "/t-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << Errno(absl::StrCat("mkdtemp \"", tmpl, "\""));
    return;
  }
  ::chmod(tmpl.c_str(), 0755);  // mkdtemp makes 0700, which the sandbox's host uid cannot enter
  path_ = tmpl;
}

TempDir::~TempDir() {
  if (!path_.empty()) RemoveTreeQuietly(path_);
}

std::string TempDir::Path(absl::string_view relative) const {
  return absl::StrCat(path_, "/", relative);
}

void E2eTest::SetUp() {
  if (::geteuid() != 0 && !Rootless()) {
    GTEST_SKIP() << "the e2e suite runs moat, which needs root (or MOAT_E2E_ROOTLESS=1)";
  }
  const std::string& error = SuiteSetupError();
  ASSERT_TRUE(error.empty()) << error;
  dir_ = std::make_unique<TempDir>();
  ASSERT_FALSE(dir_->path().empty());
}

void WriteFile(const std::string& path, absl::string_view content, mode_t mode) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out.good()) ADD_FAILURE() << "write \"" << path << "\" failed";
  if (::chmod(path.c_str(), mode) != 0) ADD_FAILURE() << Errno(absl::StrCat("chmod ", path));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << Errno(absl::StrCat("read \"", path, "\""));
    return "";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

void MakeDirs(const std::string& path, mode_t mode) {
  std::string so_far;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&so_far, "/", part);
    if (::mkdir(so_far.c_str(), mode) != 0 && errno != EEXIST) {
      ADD_FAILURE() << Errno(absl::StrCat("mkdir \"", so_far, "\""));
      return;
    }
  }
  ::chmod(path.c_str(), mode);
}

void RemoveTree(const std::string& path) {
  if (!RemoveTreeQuietly(path)) ADD_FAILURE() << Errno(absl::StrCat("remove \"", path, "\""));
}

// ---- Running moat ----

MoatProcess::MoatProcess(std::vector<std::string> args, MoatOptions options)
    : args_(std::move(args)), options_(std::move(options)) {
  Suite& suite = TheSuite();
  std::vector<std::string> env = {
      absl::StrCat("PATH=", kHostPath),
      absl::StrCat("HOME", "=", options_.home.empty() ? suite.home : options_.home)};
  // Rootless, the suite's own cgroup is not moat's to split: the delegated cgroup it is given.
  if (const char* parent = std::getenv("MOAT_CGROUP_PARENT"); Rootless() && parent != nullptr) {
    env.push_back(absl::StrCat("MOAT_CGROUP_PARENT=", parent));
  }
  env.insert(env.end(), options_.env.begin(), options_.env.end());
  std::vector<std::string> argv = {options_.binary.empty() ? suite.moat : options_.binary};
  argv.insert(argv.end(), args_.begin(), args_.end());
  std::vector<char*> argv_c, env_c;
  for (std::string& a : argv) argv_c.push_back(a.data());
  argv_c.push_back(nullptr);
  for (std::string& e : env) env_c.push_back(e.data());
  env_c.push_back(nullptr);
  std::string cwd = options_.cwd.empty() ? suite.process_dir : options_.cwd;

  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (options_.stdout_fd < 0 && ::pipe2(out, O_CLOEXEC) != 0) ADD_FAILURE() << Errno("pipe");
  if (options_.stderr_fd < 0 && ::pipe2(err, O_CLOEXEC) != 0) ADD_FAILURE() << Errno("pipe");
  started_ = NowSeconds();
  pid_ = ::fork();
  if (pid_ < 0) {
    ADD_FAILURE() << Errno("fork");
    return;
  }
  if (pid_ == 0) {
    int in = options_.stdin_fd >= 0 ? options_.stdin_fd : ::open("/dev/null", O_RDONLY);
    int o = options_.stdout_fd >= 0 ? options_.stdout_fd : out[1];
    int e = options_.stderr_fd >= 0 ? options_.stderr_fd : err[1];
    // dup2 onto a different number clears close-on-exec; copying first avoids clobbering.
    int in2 = ::fcntl(in, F_DUPFD_CLOEXEC, 100), o2 = ::fcntl(o, F_DUPFD_CLOEXEC, 100),
        e2 = ::fcntl(e, F_DUPFD_CLOEXEC, 100);
    if (::dup2(in2, 0) < 0 || ::dup2(o2, 1) < 0 || ::dup2(e2, 2) < 0) ::_exit(126);
    for (int fd : options_.inherit_fds) ::fcntl(fd, F_SETFD, 0);
    for (int fd = 3; fd < 1024; ++fd) {
      if (std::find(options_.inherit_fds.begin(), options_.inherit_fds.end(), fd) ==
          options_.inherit_fds.end()) {
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      }
    }
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    if (options_.before_exec && !options_.before_exec()) ::_exit(126);
    ::execve(argv_c[0], argv_c.data(), env_c.data());
    ::_exit(127);
  }
  if (out[1] >= 0) ::close(out[1]);
  if (err[1] >= 0) ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

MoatProcess::~MoatProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

MoatResult MoatProcess::Wait() {
  MoatResult r;
  r.pid = pid_;
  if (pid_ <= 0 || reaped_) return r;
  const double kill_after = options_.kill_after_seconds * HangScale();
  const double deadline = started_ + kill_after;
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    double left = deadline - NowSeconds();
    if (left <= 0) {
      ::kill(pid_, SIGKILL);
      r.killed_by_harness = true;
      break;
    }
    struct pollfd pfds[2];
    int n = 0;
    if (out_fd_ >= 0) pfds[n++] = {out_fd_, POLLIN, 0};
    if (err_fd_ >= 0) pfds[n++] = {err_fd_, POLLIN, 0};
    int rc = ::poll(pfds, n, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    if (rc < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      if (!pfds[i].revents) continue;
      int& fd = pfds[i].fd == out_fd_ ? out_fd_ : err_fd_;
      std::string& sink = pfds[i].fd == out_fd_ ? r.out : r.err;
      char buf[65536];
      ssize_t got = ::read(fd, buf, sizeof(buf));
      if (got > 0) {
        sink.append(buf, got);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fd);
        fd = -1;
      }
    }
  }
  // Output may be redirected elsewhere: then only the process itself is waited for.
  int status = 0;
  while (true) {
    pid_t got = ::wait4(pid_, &status, WNOHANG, &r.usage);
    if (got == pid_) break;
    if (got < 0 && errno != EINTR) {
      ADD_FAILURE() << Errno("wait4 moat");
      break;
    }
    if (NowSeconds() >= deadline && !r.killed_by_harness) {
      ::kill(pid_, SIGKILL);
      r.killed_by_harness = true;
    }
    struct timespec ts = {0, 2 * 1000 * 1000};
    ::nanosleep(&ts, nullptr);
  }
  reaped_ = true;
  r.seconds = NowSeconds() - started_;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  if (r.killed_by_harness) {
    // SIGKILL gave moat no chance to remove its cgroups; they are empty once its sandbox is gone.
    Eventually(
        [&] {
          for (const std::string& dir : CgroupDirsOf(pid_)) ::rmdir(dir.c_str());
          return CgroupDirsOf(pid_).empty();
        },
        5);
    ADD_FAILURE() << "moat " << absl::StrJoin(args_, " ") << " did not finish within " << kill_after
                  << " s; the harness killed it";
  }
  return r;
}

MoatResult RunMoat(const std::vector<std::string>& args, const MoatOptions& options) {
  MoatProcess p(args, options);
  return p.Wait();
}

namespace {
std::vector<std::string> RunArgs(bool json, const std::vector<std::string>& flags,
                                 const std::vector<std::string>& command) {
  std::vector<std::string> args = {"run"};
  if (json) args.push_back("--json");
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.insert(args.end(), command.begin(), command.end());
  return args;
}
}  // namespace

MoatResult RunPlain(const std::vector<std::string>& flags, const std::vector<std::string>& command,
                    const MoatOptions& options) {
  return RunMoat(RunArgs(false, flags, command), options);
}

nlohmann::json RunJson(const std::vector<std::string>& flags,
                       const std::vector<std::string>& command, const MoatOptions& options,
                       MoatResult* raw) {
  MoatResult r = RunMoat(RunArgs(true, flags, command), options);
  if (raw != nullptr) *raw = r;
  if (r.exit_code != 0) {
    ADD_FAILURE() << "moat run --json exited " << r.exit_code << " (signal " << r.term_signal
                  << "): " << r.err;
    return nullptr;
  }
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    ADD_FAILURE() << "moat run --json printed no JSON object: " << r.out.substr(0, 2000);
    return nullptr;
  }
  return j;
}

std::vector<std::string> Sh(absl::string_view script) {
  return {"/bin/sh", "-c", std::string(script)};
}

std::string Describe(const nlohmann::json& result) {
  if (!result.is_object()) return "(no result)";
  auto text = [&](const char* key) {
    std::string s = result.value(key, std::string());
    return s.size() > 4000 ? s.substr(0, 4000) + "..." : s;
  };
  return absl::StrCat("status=", result.value("status", std::string("?")),
                      " exit_code=", result["exit_code"].dump(),
                      " signal=", result["signal"].dump(), "\n--- stdout ---\n", text("stdout"),
                      "\n--- stderr ---\n", text("stderr"), "\n--- violations ---\n",
                      result["violations"].dump());
}

bool HasViolation(const nlohmann::json& result, absl::string_view kind,
                  absl::string_view detail_part) {
  if (!result.is_object() || !result["violations"].is_array()) return false;
  for (const nlohmann::json& v : result["violations"]) {
    if (v.value("kind", std::string()) == kind &&
        absl::StrContains(v.value("detail", std::string()), detail_part)) {
      return true;
    }
  }
  return false;
}

// ---- Host processes and cgroups ----

std::string CmdlineOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<pid_t> PidsWithMarker(absl::string_view marker) {
  std::vector<pid_t> pids;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return pids;
  while (struct dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    if (absl::StrContains(CmdlineOf(static_cast<pid_t>(pid)), marker) &&
        ProcessAlive(static_cast<pid_t>(pid))) {
      pids.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(proc);
  return pids;
}

bool ProcessAlive(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return false;
  size_t paren = line.rfind(')');  // the command name may contain spaces and parentheses
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z' &&
         line[paren + 2] != 'X';
}

HostSleeper::HostSleeper() : marker_(UniqueMarker("moat-e2e-host-sleeper")) {
  pid_ = ::fork();
  if (pid_ == 0) {
    // argv[0] carries the marker; `sleep` does not care what it is called.
    const char* argv[] = {marker_.c_str(), "600", nullptr};
    ::execv("/bin/sleep", const_cast<char**>(argv));
    ::_exit(127);
  }
  if (pid_ < 0) ADD_FAILURE() << Errno("fork host sleeper");
  Eventually([&] { return !PidsWithMarker(marker_).empty(); }, 5);
}

HostSleeper::~HostSleeper() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::vector<std::string> CgroupDirsOf(pid_t moat_pid) {
  std::vector<std::string> dirs;
  for (const std::string& pattern : {absl::StrCat("/sys/fs/cgroup/*/moat/", moat_pid, "-*"),
                                     absl::StrCat("/sys/fs/cgroup/moat/", moat_pid, "-*")}) {
    glob_t g = {};
    if (::glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) dirs.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
  }
  return dirs;
}

}  // namespace moat::e2e
