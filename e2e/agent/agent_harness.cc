#include "e2e/agent/agent_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/cgroup/cgroup.h"

extern char** environ;

namespace moat::e2e {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

std::string RandomHex(int bytes) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    unsigned char c = static_cast<unsigned char>(urandom.get());
    out += absl::StrCat(absl::Hex(c, absl::kZeroPad2));
  }
  return out;
}

// A cgroup in every hierarchy for a stand-in container, named after this test process; a
// cpuset one gets the root's cpus and mems (without which no task may join).
absl::StatusOr<std::vector<std::string>> MakeContainerCgroups() {
  absl::StatusOr<sandbox::CgroupLayout> layout = sandbox::DetectCgroupLayout();
  if (!layout.ok()) return layout.status();
  std::vector<std::string> hierarchies(layout->v1_hierarchies.begin(),
                                       layout->v1_hierarchies.end());
  if (!layout->v2_mount.empty()) hierarchies.push_back(layout->v2_mount);
  static int next = 0;
  std::vector<std::string> dirs;
  for (const std::string& hierarchy : hierarchies) {
    const std::string dir = absl::StrCat(hierarchy, "/moat-e2e-container-", ::getpid(), "-", next);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
    }
    dirs.push_back(dir);
    for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
      const std::string path = absl::StrCat(dir, "/", file);
      if (::access(path.c_str(), F_OK) == 0) {
        WriteFile(path, ReadFile(absl::StrCat(hierarchy, "/", file)), 0644);
      }
    }
  }
  ++next;
  return dirs;
}

// Pids listed in a cgroup's cgroup.procs.
std::vector<pid_t> ListedIn(const std::string& dir) {
  std::vector<pid_t> pids;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(dir + "/cgroup.procs"), '\n', absl::SkipEmpty())) {
    pid_t pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

}  // namespace

const std::string& AgentBinary() {
  static const std::string* path = [] {
    const char* env = std::getenv("MOAT_AGENT_BIN");
    return new std::string(env != nullptr && *env != '\0' ? env : MOAT_E2E_AGENT_BIN);
  }();
  return *path;
}

absl::StatusOr<std::unique_ptr<AgentProcess>> AgentProcess::Start(const AgentSetup& setup,
                                                                  const std::string& state_dir) {
  auto agent = std::unique_ptr<AgentProcess>(new AgentProcess());
  char dir[] = "/var/tmp/moat-agent-e2e-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp under /var/tmp failed");
  agent->dir_ = dir;
  agent->state_dir_ = state_dir.empty() ? agent->dir_ + "/state" : state_dir;
  ::mkdir(agent->state_dir_.c_str(), 0700);
  agent->node_token_ = RandomHex(32);
  // The token is owner-only always (the agent refuses it otherwise): read-only to its owner,
  // as the chart's secret is; the config readable to all in a config_dir.
  const mode_t config_mode = setup.config_dir.empty() ? 0600 : 0644;
  agent->config_dir_ = agent->dir_;
  if (!setup.config_dir.empty()) {
    if (::mkdir(setup.config_dir.c_str(), 0755) != 0) {
      return absl::InternalError(absl::StrCat("cannot make ", setup.config_dir));
    }
    agent->config_dir_ = setup.config_dir;
  }
  const std::string token_file = agent->config_dir_ + "/token";
  if (!WriteFile(token_file, agent->node_token_ + "\n", 0600)) {
    return absl::InternalError("cannot write the token file");
  }
  const std::string config = absl::StrCat(
      "listen: {address: 127.0.0.1, port: 0}\n", "token_file: ", token_file, "\n",
      "state_dir: ", agent->state_dir_, "\n", "restart_grace: ", setup.restart_grace, "\n",
      "heartbeat: {interval: ", setup.heartbeat, ", misses: 3}\n", "profiles:\n",
      "  - name: default\n", "    limits: ", setup.limits, "\n",
      "    pool: {floor: ", setup.pool_floor, ", ceiling: ", setup.pool_ceiling, "}\n");
  const std::string config_path = agent->config_dir_ + "/agent.yaml";
  if (!WriteFile(config_path, config, config_mode)) {
    return absl::InternalError("cannot write config");
  }
  agent->log_path_ = agent->dir_ + "/agent.log";

  std::vector<std::string> args = {AgentBinary(), "--config", config_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (setup.in_container) {
    absl::StatusOr<std::vector<std::string>> dirs = MakeContainerCgroups();
    if (!dirs.ok()) return dirs.status();
    agent->container_ = *std::move(dirs);
    // The child joins the container's cgroups, then becomes the agent: only async-signal-safe
    // calls after fork (the paths are made before).
    std::vector<std::string> procs;
    for (const std::string& dir : agent->container_) procs.push_back(dir + "/cgroup.procs");
    const int log =
        ::open(agent->log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (log < 0 || null < 0) return absl::InternalError("cannot open the agent's log");
    agent->pid_ = ::fork();
    if (agent->pid_ == 0) {
      for (const std::string& path : procs) {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0 || ::write(fd, "0", 1) != 1) ::_exit(126);
        ::close(fd);
      }
      ::dup2(log, 2);
      ::dup2(null, 1);
      ::execve(argv[0], argv.data(), environ);
      ::_exit(127);
    }
    ::close(log);
    ::close(null);
    if (agent->pid_ < 0) return absl::InternalError("fork failed");
  } else {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, agent->log_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    int error = ::posix_spawn(&agent->pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0) return absl::InternalError(absl::StrCat("cannot start ", AgentBinary()));
  }

  const std::regex listening(R"(listening on 127\.0\.0\.1:(\d+))");
  for (int i = 0; i < Rounds(300); ++i) {
    std::smatch m;
    const std::string log = agent->Log();
    if (std::regex_search(log, m, listening)) {
      agent->port_ = std::stoi(m[1]);
      return agent;
    }
    int status;
    if (::waitpid(agent->pid_, &status, WNOHANG) == agent->pid_) {
      agent->pid_ = -1;
      return absl::InternalError(absl::StrCat("moat-agent exited at start:\n", log));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("moat-agent did not listen:\n", agent->Log()));
}

AgentProcess::~AgentProcess() {
  if (pid_ > 0) Stop();
  RemoveContainer();
  if (!keep_dir_ && !dir_.empty()) std::filesystem::remove_all(dir_);
  if (config_dir_ != dir_ && !config_dir_.empty()) std::filesystem::remove_all(config_dir_);
}

void AgentProcess::KillContainer() {
  for (absl::Time give_up = absl::Now() + absl::Seconds(10); absl::Now() < give_up;) {
    bool listed = false;
    for (const std::string& dir : container_) {
      for (pid_t pid : ListedIn(dir)) {
        listed = true;
        ::kill(pid, SIGKILL);
      }
    }
    if (pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
    if (!listed && pid_ <= 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  RemoveContainer();
}

void AgentProcess::RemoveContainer() {
  for (const std::string& dir : container_) {
    // Anything left (a failed test): the directory cannot go while it holds a process.
    for (pid_t pid : ListedIn(dir)) ::kill(pid, SIGKILL);
    for (int i = 0; i < 100 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  container_.clear();
}

std::string AgentProcess::Log() const { return ReadFile(log_path_); }

void AgentProcess::Kill(int signal) {
  if (pid_ <= 0) return;
  ::kill(pid_, signal);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int AgentProcess::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

std::unique_ptr<httplib::Client> AgentProcess::NewClient() const {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port_);
  client->set_read_timeout(static_cast<time_t>(Scaled(60)), 0);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  return client;
}

std::pair<int, nlohmann::json> AgentProcess::Node(const std::string& method,
                                                  const std::string& path,
                                                  const std::string& body) {
  auto client = NewClient();
  httplib::Headers auth = {{"Authorization", "Bearer " + node_token_}};
  httplib::Result r = method == "GET"      ? client->Get(path, auth)
                      : method == "DELETE" ? client->Delete(path, auth)
                                           : client->Post(path, auth, body, "application/json");
  if (!r) return {0, nullptr};
  return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
}

std::string AgentProcess::Metrics() {
  auto client = NewClient();
  httplib::Result r = client->Get("/metrics", {{"Authorization", "Bearer " + node_token_}});
  return r ? r->body : "";
}

absl::StatusOr<std::pair<std::string, std::string>> AgentProcess::CreateSandbox(
    const std::string& body) {
  auto [status, json] = Node("POST", "/v1/sandboxes", body);
  if (status != 201 || !json.is_object()) {
    return absl::InternalError(absl::StrCat("create: HTTP ", status, " ", json.dump()));
  }
  return std::make_pair(json["id"].get<std::string>(), json["token"].get<std::string>());
}

CommandRun AgentProcess::Run(const std::string& id, const std::string& token,
                             const std::string& command, httplib::Client* client,
                             const std::string& extra_json) {
  std::unique_ptr<httplib::Client> own;
  if (client == nullptr) {
    own = NewClient();
    client = own.get();
  }
  nlohmann::json body = {{"command", command}};
  if (!extra_json.empty()) body.update(nlohmann::json::parse(extra_json));
  return RunAt(id, token, "/command", body, client);
}

CommandRun AgentProcess::RunAt(const std::string& id, const std::string& token,
                               const std::string& route, const nlohmann::json& body,
                               httplib::Client* client) {
  std::unique_ptr<httplib::Client> own;
  if (client == nullptr) {
    own = NewClient();
    client = own.get();
  }
  CommandRun run;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = absl::StrCat("/v1/sandboxes/", id, "/execd", route);
  req.headers = {{"X-EXECD-ACCESS-TOKEN", token}, {"Content-Type", "application/json"}};
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (!absl::StartsWith(event, "data: ")) continue;
      nlohmann::json e = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (!e.is_object()) continue;
      const std::string type = e.value("type", "");
      // One event per line, its terminator removed ("\n" alone: a blank line).
      auto line = [](const std::string& text) { return text == "\n" ? text : text + "\n"; };
      if (type == "stdout") run.stdout_text += line(e.value("text", ""));
      if (type == "stderr") run.stderr_text += line(e.value("text", ""));
      if (type == "execution_complete") run.completed = true;
      if (type == "error" && e.contains("error")) run.error = e["error"].dump();
      run.events.push_back(std::move(e));
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  if (client->send(req, res, err)) run.http_status = res.status;
  return run;
}

HostSnapshot SnapshotHost() {
  HostSnapshot s;
  std::string mountinfo = ReadFile("/proc/self/mountinfo");
  for (char c : mountinfo) s.mounts += c == '\n';
  for (const auto& entry : std::filesystem::directory_iterator("/sys/fs/cgroup")) {
    std::error_code ec;
    std::filesystem::path moat = entry.path() / "moat";
    if (!std::filesystem::is_directory(moat, ec)) continue;
    for (const auto& cg : std::filesystem::directory_iterator(moat, ec)) {
      if (absl::StrContains(cg.path().filename().string(), "-sb-")) {
        s.moat_cgroups.push_back(cg.path().string());
      }
    }
  }
  std::error_code ec;
  if (std::filesystem::is_directory("/sys/fs/cgroup/moat", ec)) {
    for (const auto& cg : std::filesystem::directory_iterator("/sys/fs/cgroup/moat", ec)) {
      if (absl::StrContains(cg.path().filename().string(), "-sb-")) {
        s.moat_cgroups.push_back(cg.path().string());
      }
    }
  }
  return s;
}

std::vector<std::string> AgentCgroups(pid_t agent_pid) {
  std::vector<std::string> out;
  for (const std::string& path : SnapshotHost().moat_cgroups) {
    if (absl::StrContains(path, absl::StrCat("/", agent_pid, "-sb-"))) out.push_back(path);
  }
  return out;
}

std::vector<pid_t> ProcessesWith(const std::string& marker) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::string cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (absl::StrContains(cmdline, marker) && pid != ::getpid()) found.push_back(pid);
  }
  return found;
}

std::vector<pid_t> ProcessesWith(const std::string& marker, pid_t agent_pid) {
  const std::string sandbox_cgroup = absl::StrCat("/", agent_pid, "-sb-");
  std::vector<pid_t> found;
  for (pid_t pid : ProcessesWith(marker)) {
    if (absl::StrContains(ReadFile(absl::StrCat("/proc/", pid, "/cgroup")), sandbox_cgroup)) {
      found.push_back(pid);
    }
  }
  return found;
}

int OpenFds(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); ++it) {
    ++n;
  }
  return n;
}

long RssKib(pid_t pid) {
  for (absl::string_view line :
       absl::StrSplit(ReadFile(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (absl::ConsumePrefix(&line, "VmRSS:")) {
      long kib = 0;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      absl::SimpleAtoi(digits, &kib);
      return kib;
    }
  }
  return -1;
}

std::vector<pid_t> ProbesOf(const std::string& id) {
  std::vector<pid_t> probes;
  for (pid_t pid : ProcessesWith(absl::StrCat("--sandbox-id=", id))) {
    std::string comm = ReadFile(absl::StrCat("/proc/", pid, "/comm"));
    if (absl::StartsWith(comm, "moat-probe")) probes.push_back(pid);
  }
  return probes;
}

}  // namespace moat::e2e
