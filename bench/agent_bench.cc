// agent_bench: moat-agent through its HTTP API against crun doing the same work, in one run
// (issue 4, "Speed"): a command on a warm sandbox (p50, p99), a cold sandbox start, commands per
// second with 2 clients, memory per idle warm sandbox, and 10 MiB of output in 64-byte lines
// streamed to the client (issue 11: the per-line events must not slow a large output).
// bench/agent.sh starts the agent and prepares crun's bundle; `agent_bench --help` lists the flags.
//
// Order matters: TimedRun into crun's mount namespace needs a single-threaded process, so every
// crun measurement comes first (the 2-client crun case runs in forked children); the moat cases
// follow, and only the 2-client one starts threads. httplib's blocking client starts none.
#include <dirent.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/agent_memory.h"
#include "bench/crun_config.h"
#include "bench/crun_view.h"
#include "bench/latency_stats.h"
#include "bench/timed_run.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace moat::bench {
namespace {

constexpr char kUsage[] = R"(usage: agent_bench --port=P --token-file=F --agent-pid=PID [FLAGS]

Measures a running moat-agent through its API and crun doing the same work, and prints one
table with ratios and whether issue 4's aims are met. bench/agent.sh starts the agent (pool
floor and ceiling = --pool) and makes crun's bundle.

  --port=P            the agent's port on 127.0.0.1
  --token-file=F      the agent's node token
  --agent-pid=PID     the agent's pid (its sandboxes' cgroups are moat/PID-sb-*)
  --profile=NAME      the profile to use (default "default"); its pool must be --pool deep
  --commands=N        warm /bin/true commands per runner (default 2000)
  --cold=N            cold starts per runner (default 30)
  --seconds=S         length of the 2-client throughput run per runner (default 5)
  --streams=N         10 MiB outputs streamed per runner (default 5)
  --pool=K            warm pool depth to wait for and idle sandboxes to measure (default 20)
  --crun=PATH|none    crun (default: crun from PATH)
  --crun-bundle=DIR   OCI bundle for crun: DIR/config.json and an empty DIR/rootfs
)";

struct Flags {
  int port = 0;
  std::string token_file;
  pid_t agent_pid = 0;
  std::string profile = "default";
  int commands = 2000;
  int cold = 30;
  int seconds = 5;
  int streams = 5;
  int pool = 20;
  std::string crun;
  std::string crun_bundle;
};

bool ParseInt(absl::string_view name, absl::string_view value, int min, int* out) {
  if (absl::SimpleAtoi(value, out) && *out >= min) return true;
  std::fprintf(stderr, "agent_bench: %s wants a whole number >= %d, not \"%s\"\n",
               std::string(name).c_str(), min, std::string(value).c_str());
  return false;
}

std::optional<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    const absl::string_view value = eq == absl::string_view::npos ? "" : arg.substr(eq + 1);
    bool ok = true;
    int pid = 0;
    if (name == "--port") {
      ok = ParseInt(name, value, 1, &f.port);
    } else if (name == "--agent-pid") {
      ok = ParseInt(name, value, 1, &pid);
      f.agent_pid = pid;
    } else if (name == "--commands") {
      ok = ParseInt(name, value, 1, &f.commands);
    } else if (name == "--cold") {
      ok = ParseInt(name, value, 1, &f.cold);
    } else if (name == "--seconds") {
      ok = ParseInt(name, value, 1, &f.seconds);
    } else if (name == "--streams") {
      ok = ParseInt(name, value, 1, &f.streams);
    } else if (name == "--pool") {
      ok = ParseInt(name, value, 1, &f.pool);
    } else if (name == "--token-file") {
      f.token_file = std::string(value);
    } else if (name == "--profile") {
      f.profile = std::string(value);
    } else if (name == "--crun") {
      f.crun = std::string(value);
    } else if (name == "--crun-bundle") {
      f.crun_bundle = std::string(value);
    } else {
      std::fprintf(stderr, "agent_bench: unknown argument \"%s\" (see --help)\n", argv[i]);
      return std::nullopt;
    }
    if (!ok) return std::nullopt;
  }
  if (f.port == 0 || f.token_file.empty() || f.agent_pid == 0) {
    std::fprintf(stderr,
                 "agent_bench: --port, --token-file and --agent-pid are required "
                 "(bench/agent.sh passes them)\n");
    return std::nullopt;
  }
  return f;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using Clock = std::chrono::steady_clock;
absl::Duration Since(Clock::time_point start) { return absl::FromChrono(Clock::now() - start); }

// ---------------------------------------------------------------------------------------------
// Results

struct Latency {
  int runs = 0;
  int failed = 0;
  absl::Duration p50, p99;
  std::string failure;  // the first failure
};

Latency Summarise(std::vector<absl::Duration> samples, int failed, std::string failure) {
  Latency out;
  out.failed = failed;
  out.failure = std::move(failure);
  out.runs = static_cast<int>(samples.size());
  if (samples.empty()) return out;
  out.p50 = Summarize(samples).median;
  std::sort(samples.begin(), samples.end());
  out.p99 = NearestRankPercentile(samples, 99);
  return out;
}

// 10 MiB on stdout in lines of 64 bytes (163840 of them), the same command for both runners.
constexpr uint64_t kStreamBytes = 10 << 20;
constexpr char kStreamCommand[] =
    "yes 012345678901234567890123456789012345678901234567890123456789abc | head -c 10485760";

struct Throughput {
  int64_t commands = 0;
  int failed = 0;
  absl::Duration elapsed;
  double PerSecond() const {
    return elapsed > absl::ZeroDuration() ? commands / absl::ToDoubleSeconds(elapsed) : 0;
  }
};

// Memory of idle sandboxes, summed over all of them (divide by `count`).
struct Memory {
  int count = 0;
  uint64_t charge = 0;       // their cgroups' charge
  uint64_t outside_pss = 0;  // moat: Pss of their moat-probe processes
  int outside_processes = 0;
  uint64_t init_pte = 0;  // VmPTE of each one's init
  // Selected memory.stat lines (and v1's kmem usage), summed, in the order found.
  std::vector<std::pair<std::string, uint64_t>> parts;
  std::string error;  // why it could not be measured
  uint64_t Total() const { return charge + outside_pss + init_pte; }
};

// The memory.stat keys worth showing: what an idle sandbox's charge is made of.
constexpr const char* kStatKeys[] = {"rss",        "cache", "shmem",  "mapped_file",
                                     "anon",       "file",  "kernel", "kernel_stack",
                                     "pagetables", "slab",  "sock"};

// Adds `cgroup`'s charge and its memory.stat parts to `memory`.
absl::Status AddCgroupCharge(const MemoryCgroupMount& mount, const std::string& cgroup,
                             Memory* memory) {
  uint64_t charge = 0;
  const std::string text = ReadFile(absl::StrCat(cgroup, "/", mount.ChargeFile()));
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &charge)) {
    return absl::NotFoundError(
        absl::StrCat("cannot read \"", cgroup, "/", mount.ChargeFile(), "\""));
  }
  memory->charge += charge;
  auto add_part = [memory](const std::string& key, uint64_t value) {
    for (auto& [k, v] : memory->parts) {
      if (k == key) {
        v += value;
        return;
      }
    }
    memory->parts.emplace_back(key, value);
  };
  if (!mount.v2) {
    uint64_t kmem = 0;
    if (absl::SimpleAtoi(
            absl::StripAsciiWhitespace(ReadFile(cgroup + "/memory.kmem.usage_in_bytes")), &kmem)) {
      add_part("kmem (v1)", kmem);
    }
  }
  const std::string stat = ReadFile(cgroup + "/memory.stat");
  for (const char* key : kStatKeys) {
    if (std::optional<uint64_t> v = KeyValue(stat, key)) add_part(key, *v);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PteOf(pid_t pid) {
  return KbFieldBytes(ReadFile(absl::StrCat("/proc/", pid, "/status")), "VmPTE");
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    int pid = 0;
    if (absl::SimpleAtoi(e->d_name, &pid)) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// ---------------------------------------------------------------------------------------------
// crun

struct Crun {
  std::string binary;
  std::string bundle;
  std::string true_config;
  std::string sleep_config;
  std::vector<std::string> env;
  std::optional<CrunView> view;
  std::vector<std::string> notes;

  std::vector<std::string> Base() const {
    return {binary, "--root=" + bundle + "/state", "--cgroup-manager=cgroupfs"};
  }
  absl::StatusOr<RunOutcome> Run(std::vector<std::string> args) const {
    std::vector<std::string> argv = Base();
    argv.insert(argv.end(), args.begin(), args.end());
    return TimedRun({argv, env, view->mount_ns.get()});
  }
};

std::string FailureOf(const absl::StatusOr<RunOutcome>& outcome) {
  if (!outcome.ok()) return std::string(outcome.status().message());
  std::string out = DescribeWaitStatus(outcome->wait_status);
  absl::string_view text = absl::StripAsciiWhitespace(outcome->output);
  if (!text.empty()) absl::StrAppend(&out, ": ", text.substr(0, text.find('\n')));
  return out;
}

bool Ok(const absl::StatusOr<RunOutcome>& outcome) { return outcome.ok() && Succeeded(*outcome); }

std::string ContainerId(absl::string_view what, int i) {
  return absl::StrCat("agent-bench-", ::getpid(), "-", what, "-", i);
}

// Starts `sleep infinity` detached as container `id`.
absl::Status StartSleeper(const Crun& crun, const std::string& id) {
  absl::StatusOr<RunOutcome> out =
      crun.Run({"run", "-d", "--bundle=" + crun.bundle, "--config=" + crun.sleep_config, id});
  if (Ok(out)) return absl::OkStatus();
  crun.Run({"delete", "--force", id}).IgnoreError();
  return absl::InternalError(absl::StrCat("crun run -d ", id, " failed: ", FailureOf(out)));
}

void DeleteContainer(const Crun& crun, const std::string& id) {
  crun.Run({"delete", "--force", id}).IgnoreError();
}

Latency CrunExecLatency(const Crun& crun, const std::string& id, int n) {
  std::vector<absl::Duration> samples;
  int failed = 0;
  std::string failure;
  for (int i = -10; i < n; ++i) {  // 10 untimed first
    absl::StatusOr<RunOutcome> out = crun.Run({"exec", id, "/bin/true"});
    if (!Ok(out)) {
      if (failed++ == 0) failure = FailureOf(out);
      continue;
    }
    if (i >= 0) samples.push_back(out->elapsed);
  }
  return Summarise(std::move(samples), failed, failure);
}

Latency CrunColdLatency(const Crun& crun, int n) {
  std::vector<absl::Duration> samples;
  int failed = 0;
  std::string failure;
  for (int i = -2; i < n; ++i) {  // 2 untimed first
    const std::string id = ContainerId("cold", i + 2);
    absl::StatusOr<RunOutcome> out =
        crun.Run({"run", "--bundle=" + crun.bundle, "--config=" + crun.true_config, id});
    if (!Ok(out)) {
      DeleteContainer(crun, id);
      if (failed++ == 0) failure = FailureOf(out);
      continue;
    }
    if (i >= 0) samples.push_back(out->elapsed);
  }
  return Summarise(std::move(samples), failed, failure);
}

// `crun exec` of kStreamCommand, its output written straight into a memory file (TimedRun): what
// producing it costs, with no reader (moat's figure adds the cleaning and the SSE stream to a
// client that reads it all).
Latency CrunStream(const Crun& crun, const std::string& id, int n) {
  std::vector<absl::Duration> samples;
  int failed = 0;
  std::string failure;
  for (int i = -1; i < n; ++i) {  // 1 untimed first
    absl::StatusOr<RunOutcome> out = crun.Run({"exec", id, "/bin/sh", "-c", kStreamCommand});
    if (!Ok(out) || out->output_bytes != kStreamBytes) {
      if (failed++ == 0) {
        failure = Ok(out) ? absl::StrCat("wrote ", out->output_bytes, " bytes") : FailureOf(out);
      }
      continue;
    }
    if (i >= 0) samples.push_back(out->elapsed);
  }
  return Summarise(std::move(samples), failed, failure);
}

// Two forked children, each running `crun exec` on its own container back to back for
// `seconds`; each reports its count and failures through a pipe.
Throughput CrunThroughput(const Crun& crun, const std::vector<std::string>& ids, int seconds) {
  Throughput result;
  struct Child {
    pid_t pid;
    int fd;
  };
  std::vector<Child> children;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::seconds(seconds);
  for (const std::string& id : ids) {
    int fds[2];
    if (::pipe(fds) != 0) continue;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      int64_t counts[2] = {0, 0};
      while (Clock::now() < deadline) {
        ++counts[Ok(crun.Run({"exec", id, "/bin/true"})) ? 0 : 1];
      }
      (void)!::write(fds[1], counts, sizeof(counts));
      ::_exit(0);
    }
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      continue;
    }
    children.push_back({pid, fds[0]});
  }
  for (const Child& c : children) {
    int64_t counts[2] = {0, 0};
    if (::read(c.fd, counts, sizeof(counts)) == sizeof(counts)) {
      result.commands += counts[0];
      result.failed += static_cast<int>(counts[1]);
    }
    ::close(c.fd);
    ::waitpid(c.pid, nullptr, 0);
  }
  result.elapsed = Since(start);
  return result;
}

// K idle `sleep infinity` containers: each one's cgroup charge plus its init's VmPTE.
Memory CrunMemory(const Crun& crun, const MemoryCgroupMount& mount, int k) {
  Memory memory;
  std::vector<std::string> ids;
  for (int i = 0; i < k; ++i) {
    ids.push_back(ContainerId("idle", i));
    if (absl::Status started = StartSleeper(crun, ids.back()); !started.ok()) {
      memory.error = std::string(started.message());
      ids.pop_back();
      break;
    }
  }
  // Let the containers settle as the moat pool has (its sandboxes wait for seconds).
  if (memory.error.empty()) ::sleep(2);
  for (const std::string& id : ids) {
    if (!memory.error.empty()) break;
    absl::StatusOr<RunOutcome> state = crun.Run({"state", id});
    pid_t pid = 0;
    if (Ok(state)) {
      nlohmann::json doc = nlohmann::json::parse(state->output, nullptr, false);
      if (doc.is_object()) pid = doc.value("pid", 0);
    }
    std::optional<std::string> cgroup =
        pid > 0 ? CgroupPathOf(ReadFile(absl::StrCat("/proc/", pid, "/cgroup")),
                               mount.v2 ? "" : "memory")
                : std::nullopt;
    if (!cgroup.has_value()) {
      memory.error = absl::StrCat("cannot find container ", id, "'s init or its memory cgroup");
      break;
    }
    if (absl::Status added = AddCgroupCharge(mount, mount.path + *cgroup, &memory); !added.ok()) {
      memory.error = std::string(added.message());
      break;
    }
    absl::StatusOr<uint64_t> pte = PteOf(pid);
    memory.init_pte += pte.ok() ? *pte : 0;
    ++memory.count;
  }
  for (const std::string& id : ids) DeleteContainer(crun, id);
  return memory;
}

struct CrunResults {
  std::string skipped;
  Latency warm, cold, stream;
  Throughput throughput;
  Memory memory;
};

CrunResults MeasureCrun(Crun& crun, const Flags& flags, const MemoryCgroupMount& mount) {
  CrunResults r;
  if (crun.binary.empty()) {
    r.skipped = "crun not found (apt-get install crun, or --crun=PATH)";
    return r;
  }
  if (crun.bundle.empty()) {
    r.skipped = "no --crun-bundle (bench/agent.sh makes one)";
    return r;
  }
  crun.true_config = crun.bundle + "/config.true.json";
  crun.sleep_config = crun.bundle + "/config.sleep.json";
  const std::string tmpl = crun.bundle + "/config.json";
  for (auto [path, argv] :
       {std::pair{crun.true_config, std::vector<std::string>{"/bin/true"}},
        std::pair{crun.sleep_config, std::vector<std::string>{"/bin/sleep", "infinity"}}}) {
    if (absl::Status s = WriteCrunConfig(tmpl, argv, path); !s.ok()) {
      r.skipped = std::string(s.message());
      return r;
    }
  }
  absl::StatusOr<CrunView> view = PrepareCrunView(crun.bundle + "/rootfs");
  if (!view.ok()) {
    r.skipped = absl::StrCat("cannot prepare crun's mount namespace: ", view.status().message());
    return r;
  }
  crun.view = std::move(*view);
  crun.notes = crun.view->notes;

  std::vector<std::string> sleepers = {ContainerId("warm", 0), ContainerId("warm", 1)};
  for (const std::string& id : sleepers) {
    if (absl::Status s = StartSleeper(crun, id); !s.ok()) {
      r.skipped = std::string(s.message());
      for (const std::string& other : sleepers) DeleteContainer(crun, other);
      return r;
    }
  }
  std::fprintf(stderr, "agent_bench: crun: %d warm commands\n", flags.commands);
  r.warm = CrunExecLatency(crun, sleepers[0], flags.commands);
  std::fprintf(stderr, "agent_bench: crun: %d cold starts\n", flags.cold);
  r.cold = CrunColdLatency(crun, flags.cold);
  std::fprintf(stderr, "agent_bench: crun: 2 clients for %d s\n", flags.seconds);
  r.throughput = CrunThroughput(crun, sleepers, flags.seconds);
  std::fprintf(stderr, "agent_bench: crun: %d outputs of 10 MiB\n", flags.streams);
  r.stream = CrunStream(crun, sleepers[0], flags.streams);
  for (const std::string& id : sleepers) DeleteContainer(crun, id);
  std::fprintf(stderr, "agent_bench: crun: memory of %d idle containers\n", flags.pool);
  r.memory = CrunMemory(crun, mount, flags.pool);
  return r;
}

// ---------------------------------------------------------------------------------------------
// moat-agent

class Agent {
 public:
  Agent(const Flags& flags, std::string token)
      : flags_(flags), token_(std::move(token)), client_(Connect()) {}

  httplib::Client Connect() const {
    httplib::Client c("127.0.0.1", flags_.port);
    c.set_keep_alive(true);
    c.set_tcp_nodelay(true);  // headers and body go in separate writes; no Nagle wait between
    c.set_read_timeout(60, 0);
    return c;
  }
  httplib::Headers NodeAuth() const { return {{"Authorization", "Bearer " + token_}}; }

  struct Sandbox {
    std::string id;
    std::string token;
  };

  // POST /v1/sandboxes; `limits` empty: the profile's (a warm one when the pool has one).
  absl::StatusOr<Sandbox> Create(const nlohmann::json& limits = nullptr) {
    nlohmann::json body = {{"profile", flags_.profile}, {"ttl_seconds", 600}};
    if (!limits.is_null()) body["limits"] = limits;
    httplib::Result res =
        client_.Post("/v1/sandboxes", NodeAuth(), body.dump(), "application/json");
    if (!res) {
      return absl::UnavailableError(
          absl::StrCat("POST /v1/sandboxes: ", httplib::to_string(res.error())));
    }
    if (res->status != 201 && res->status != 200) {
      return absl::InternalError(absl::StrCat("POST /v1/sandboxes: ", res->status, " ", res->body));
    }
    nlohmann::json doc = nlohmann::json::parse(res->body, nullptr, false);
    if (!doc.is_object() || !doc.contains("id") || !doc.contains("token")) {
      return absl::InternalError(
          absl::StrCat("POST /v1/sandboxes: no id and token in ", res->body));
    }
    return Sandbox{doc["id"].get<std::string>(), doc["token"].get<std::string>()};
  }

  absl::Status Delete(const std::string& id) {
    httplib::Result res =
        Retried([&] { return client_.Delete("/v1/sandboxes/" + id, NodeAuth()); });
    if (!res || res->status >= 300) {
      return absl::InternalError(absl::StrCat("DELETE /v1/sandboxes/", id, " failed: ",
                                              res ? res->body : httplib::to_string(res.error())));
    }
    return absl::OkStatus();
  }

  std::optional<double> PoolDepth() {
    httplib::Result res = Retried([&] { return client_.Get("/metrics", NodeAuth()); });
    if (!res || res->status != 200) return std::nullopt;
    return MetricValue(res->body,
                       absl::StrCat("moat_pool_depth{profile=\"", flags_.profile, "\"}"));
  }

  // Waits until the pool holds --pool sandboxes and, when `cgroups` is given, until exactly that
  // many sandbox cgroups exist besides `held` (recycling done).
  absl::Status WaitForFullPool(absl::Duration limit,
                               const std::function<int()>& cgroups = nullptr) {
    const Clock::time_point start = Clock::now();
    std::optional<double> depth;
    int count = -1;
    while (Since(start) < limit) {
      depth = PoolDepth();
      count = cgroups ? cgroups() : flags_.pool;
      if (depth == flags_.pool && count == flags_.pool) return absl::OkStatus();
      ::usleep(100 * 1000);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "the pool did not reach ", flags_.pool, " sandboxes within ", absl::FormatDuration(limit),
        " (depth ", depth ? absl::StrCat(*depth) : "unknown", ", sandbox cgroups ", count,
        "); is the agent's pool floor --pool?"));
  }

  const Flags& flags() const { return flags_; }

 private:
  // The agent's server closes a keep-alive connection after a few requests or seconds idle;
  // httplib's client notices only when the next request fails, and then connects again.
  template <typename F>
  httplib::Result Retried(F send) {
    httplib::Result res = send();
    if (!res) res = send();
    return res;
  }

  const Flags& flags_;
  const std::string token_;
  httplib::Client client_;
};

struct CommandTimes {
  absl::Duration first_event;  // until the first bytes of the stream (the "init" event)
  absl::Duration end;          // until the end of the stream
};

// Runs /bin/true on `sandbox` over `client`: the times from sending the POST to the first bytes
// of the SSE stream and to its end, or an error.
absl::StatusOr<CommandTimes> RunTrue(httplib::Client& client, const Agent::Sandbox& sandbox) {
  httplib::Request req;
  req.method = "POST";
  req.path = absl::StrCat("/v1/sandboxes/", sandbox.id, "/execd/command");
  req.headers = {{"X-EXECD-ACCESS-TOKEN", sandbox.token}, {"Content-Type", "application/json"}};
  req.body = R"({"command":"/bin/true"})";
  std::string body;
  std::optional<Clock::time_point> first;
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (!first.has_value()) first = Clock::now();
    body.append(data, size);
    return true;
  };
  const Clock::time_point start = Clock::now();
  httplib::Result res = client.send(req);
  const Clock::time_point end = Clock::now();
  if (!res) return absl::UnavailableError(httplib::to_string(res.error()));
  if (res->status != 200) return absl::InternalError(absl::StrCat(res->status, " ", body));
  if (!first.has_value() || !absl::StrContains(body, "\"execution_complete\"") ||
      absl::StrContains(body, "\"type\":\"error\"")) {
    return absl::InternalError(absl::StrCat("unexpected stream: ", body));
  }
  return CommandTimes{absl::FromChrono(*first - start), absl::FromChrono(end - start)};
}

// kStreamCommand through execd: the whole SSE stream read; its stdout events must carry every
// line (163840 events of 64 bytes, the newline removed).
// `fewest_lines`: the fewest stdout events one stream carried (each must carry every line).
Latency MoatStream(const Agent& agent, const Agent::Sandbox& sandbox, int n,
                   uint64_t* fewest_lines) {
  httplib::Client client = agent.Connect();
  client.set_read_timeout(300, 0);
  std::vector<absl::Duration> samples;
  int failed = 0;
  std::string failure;
  for (int i = -1; i < n; ++i) {  // 1 untimed first
    httplib::Request req;
    req.method = "POST";
    req.path = absl::StrCat("/v1/sandboxes/", sandbox.id, "/execd/command");
    req.headers = {{"X-EXECD-ACCESS-TOKEN", sandbox.token}, {"Content-Type", "application/json"}};
    req.body = nlohmann::json{{"command", kStreamCommand}}.dump();
    uint64_t stdout_events = 0, received = 0;
    std::string pending;
    req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      received += size;
      pending.append(data, size);
      size_t at = 0, end;
      while ((end = pending.find('\n', at)) != std::string::npos) {
        const absl::string_view line = absl::string_view(pending).substr(at, end - at);
        if (absl::StartsWith(line, "data: ") && absl::StrContains(line, "\"type\":\"stdout\"")) {
          ++stdout_events;
        }
        at = end + 1;
      }
      pending.erase(0, at);
      return true;
    };
    const Clock::time_point start = Clock::now();
    httplib::Result res = client.send(req);
    const absl::Duration elapsed = Since(start);
    const uint64_t lines = kStreamBytes / 64;
    if (res && res->status == 200 && (i == -1 || stdout_events < *fewest_lines)) {
      *fewest_lines = stdout_events;
    }
    if (!res || res->status != 200 || stdout_events != lines) {
      if (failed++ == 0) {
        failure = !res ? httplib::to_string(res.error())
                       : absl::StrCat(res->status, ": ", stdout_events, " stdout events of ", lines,
                                      " lines, ", received, " bytes of stream");
      }
      continue;
    }
    if (i >= 0) samples.push_back(elapsed);
  }
  return Summarise(std::move(samples), failed, failure);
}

// The end-of-stream latency; `first_event` gets the latency of the stream's first bytes.
Latency MoatWarmLatency(const Agent& agent, const Agent::Sandbox& sandbox, int n,
                        Latency* first_event) {
  httplib::Client client = agent.Connect();
  std::vector<absl::Duration> samples, firsts;
  int failed = 0;
  std::string failure;
  for (int i = -20; i < n; ++i) {  // 20 untimed first
    absl::StatusOr<CommandTimes> t = RunTrue(client, sandbox);
    if (!t.ok()) {
      if (failed++ == 0) failure = std::string(t.status().message());
      continue;
    }
    if (i < 0) continue;
    samples.push_back(t->end);
    firsts.push_back(t->first_event);
  }
  *first_event = Summarise(std::move(firsts), failed, failure);
  return Summarise(std::move(samples), failed, failure);
}

// Cold: limits other than the profile's (pids 100) are never served from the pool.
Latency MoatColdLatency(Agent& agent, int n) {
  std::vector<absl::Duration> samples;
  int failed = 0;
  std::string failure;
  const nlohmann::json cold_limits = {{"pids", 100}};
  for (int i = -2; i < n; ++i) {  // 2 untimed first
    const Clock::time_point start = Clock::now();
    absl::StatusOr<Agent::Sandbox> created = agent.Create(cold_limits);
    const absl::Duration elapsed = Since(start);
    if (!created.ok()) {
      if (failed++ == 0) failure = std::string(created.status().message());
      continue;
    }
    if (i >= 0) samples.push_back(elapsed);
    if (absl::Status deleted = agent.Delete(created->id); !deleted.ok()) {
      std::fprintf(stderr, "agent_bench: %s\n", deleted.ToString().c_str());
    }
  }
  return Summarise(std::move(samples), failed, failure);
}

Throughput MoatThroughput(const Agent& agent, const std::vector<Agent::Sandbox>& sandboxes,
                          int seconds) {
  std::vector<int64_t> counts(sandboxes.size() * 2, 0);
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::seconds(seconds);
  for (size_t i = 0; i < sandboxes.size(); ++i) {
    threads.emplace_back([&, i] {
      httplib::Client client = agent.Connect();
      while (Clock::now() < deadline)
        ++counts[2 * i + (RunTrue(client, sandboxes[i]).ok() ? 0 : 1)];
    });
  }
  for (std::thread& t : threads) t.join();
  Throughput result;
  result.elapsed = Since(start);
  for (size_t i = 0; i < sandboxes.size(); ++i) {
    result.commands += counts[2 * i];
    result.failed += static_cast<int>(counts[2 * i + 1]);
  }
  return result;
}

// Does a process of `cgroup` have the agent as its parent (the sandbox's init)?
bool HoldsAChildOf(const std::string& cgroup, pid_t agent_pid) {
  for (absl::string_view line :
       absl::StrSplit(ReadFile(cgroup + "/cgroup.procs"), '\n', absl::SkipEmpty())) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(line, &pid)) continue;
    absl::StatusOr<ProcStat> stat = ParseProcStat(ReadFile(absl::StrCat("/proc/", pid, "/stat")));
    if (stat.ok() && stat->ppid == agent_pid) return true;
  }
  return false;
}

// The agent's sandbox cgroups in the memory hierarchy: <mount>/moat/<agent pid>-*, and keep-sb-*
// that hold a child of the agent.
std::vector<std::string> SandboxCgroups(const MemoryCgroupMount& mount, pid_t agent_pid) {
  std::vector<std::string> out;
  const std::string dir = mount.path + "/moat";
  const std::string prefix = absl::StrCat(agent_pid, "-");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    // With a restart grace (the default) the agent names them after no pid: keep-sb-*, which
    // other agents on the machine make too (and leave when their sandboxes end after a grace
    // with no agent): only those whose init is this agent's child are its own.
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    if (absl::StartsWith(e->d_name, prefix) ||
        (absl::StartsWith(e->d_name, "keep-sb-") && HoldsAChildOf(path, agent_pid))) {
      out.push_back(path);
    }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Every idle pool sandbox: cgroup charge, its init's VmPTE (init is the agent's child in the
// cgroup), and the Pss of the agent's moat-probe children.
Memory MoatMemory(const MemoryCgroupMount& mount, pid_t agent_pid) {
  Memory memory;
  for (const std::string& cgroup : SandboxCgroups(mount, agent_pid)) {
    if (absl::Status added = AddCgroupCharge(mount, cgroup, &memory); !added.ok()) {
      memory.error = std::string(added.message());
      return memory;
    }
    ++memory.count;
    for (absl::string_view line :
         absl::StrSplit(ReadFile(cgroup + "/cgroup.procs"), '\n', absl::SkipEmpty())) {
      pid_t pid = 0;
      if (!absl::SimpleAtoi(line, &pid)) continue;
      absl::StatusOr<ProcStat> stat = ParseProcStat(ReadFile(absl::StrCat("/proc/", pid, "/stat")));
      if (!stat.ok() || stat->ppid != agent_pid) continue;
      absl::StatusOr<uint64_t> pte = PteOf(pid);
      memory.init_pte += pte.ok() ? *pte : 0;
    }
  }
  for (pid_t pid : AllPids()) {
    absl::StatusOr<ProcStat> stat = ParseProcStat(ReadFile(absl::StrCat("/proc/", pid, "/stat")));
    if (!stat.ok() || stat->ppid != agent_pid || stat->comm != "moat-probe") continue;
    absl::StatusOr<uint64_t> pss =
        KbFieldBytes(ReadFile(absl::StrCat("/proc/", pid, "/smaps_rollup")), "Pss");
    if (!pss.ok()) continue;
    memory.outside_pss += *pss;
    ++memory.outside_processes;
  }
  return memory;
}

struct MoatResults {
  Latency warm, warm_first_event, cold, stream;
  uint64_t stream_fewest_lines = 0;  // of kStreamBytes / 64
  Throughput throughput;
  Memory memory;
  uint64_t agent_pss = 0;
};

absl::StatusOr<MoatResults> MeasureMoat(Agent& agent, const MemoryCgroupMount& mount) {
  const Flags& flags = agent.flags();
  const absl::Duration fill = absl::Seconds(180);
  auto pool_cgroups = [&] {
    return static_cast<int>(SandboxCgroups(mount, flags.agent_pid).size());
  };
  MoatResults r;
  std::fprintf(stderr, "agent_bench: waiting for the pool of %d\n", flags.pool);
  if (absl::Status s = agent.WaitForFullPool(fill, pool_cgroups); !s.ok()) return s;
  absl::StatusOr<Agent::Sandbox> a = agent.Create();
  if (!a.ok()) return a.status();
  absl::StatusOr<Agent::Sandbox> b = agent.Create();
  if (!b.ok()) return b.status();
  if (absl::Status s = agent.WaitForFullPool(fill); !s.ok()) return s;

  std::fprintf(stderr, "agent_bench: moat: %d warm commands\n", flags.commands);
  r.warm = MoatWarmLatency(agent, *a, flags.commands, &r.warm_first_event);
  std::fprintf(stderr, "agent_bench: moat: %d cold starts\n", flags.cold);
  r.cold = MoatColdLatency(agent, flags.cold);
  std::fprintf(stderr, "agent_bench: moat: 2 clients for %d s\n", flags.seconds);
  r.throughput = MoatThroughput(agent, {*a, *b}, flags.seconds);
  std::fprintf(stderr, "agent_bench: moat: %d outputs of 10 MiB\n", flags.streams);
  r.stream = MoatStream(agent, *a, flags.streams, &r.stream_fewest_lines);
  for (const Agent::Sandbox* s : {&*a, &*b}) {
    if (absl::Status deleted = agent.Delete(s->id); !deleted.ok()) return deleted;
  }

  std::fprintf(stderr, "agent_bench: moat: memory of %d idle warm sandboxes\n", flags.pool);
  if (absl::Status s = agent.WaitForFullPool(fill, pool_cgroups); !s.ok()) return s;
  ::sleep(2);  // as long as the crun containers were left to settle
  r.memory = MoatMemory(mount, flags.agent_pid);
  absl::StatusOr<uint64_t> agent_pss =
      KbFieldBytes(ReadFile(absl::StrCat("/proc/", flags.agent_pid, "/smaps_rollup")), "Pss");
  r.agent_pss = agent_pss.ok() ? *agent_pss : 0;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Report

std::string Ms(absl::Duration d) { return absl::StrFormat("%.2f", absl::ToDoubleMilliseconds(d)); }
std::string KiB(double bytes) { return absl::StrFormat("%.0f", bytes / 1024); }
std::string Ratio(double moat, double crun) {
  return crun > 0 ? absl::StrFormat("%.2fx", moat / crun) : "-";
}

void Row(const std::string& what, const std::string& moat, const std::string& crun,
         const std::string& ratio) {
  std::printf("%-40s %12s %12s %10s\n", what.c_str(), moat.c_str(), crun.c_str(), ratio.c_str());
}

double PerSandbox(const Memory& m, uint64_t part) { return m.count ? double(part) / m.count : 0; }

void PrintMemoryParts(const char* who, const Memory& m) {
  if (!m.error.empty()) {
    std::printf("  %s: not measured: %s\n", who, m.error.c_str());
    return;
  }
  std::string parts;
  for (const auto& [key, value] : m.parts) {
    absl::StrAppend(&parts, parts.empty() ? "" : ", ", key, " ", KiB(PerSandbox(m, value)));
  }
  std::printf(
      "  %s, per sandbox over %d (KiB): total %s = cgroup charge %s + outside Pss %s + "
      "init VmPTE %s\n    memory.stat of the charge: %s\n",
      who, m.count, KiB(PerSandbox(m, m.Total())).c_str(), KiB(PerSandbox(m, m.charge)).c_str(),
      KiB(PerSandbox(m, m.outside_pss)).c_str(), KiB(PerSandbox(m, m.init_pte)).c_str(),
      parts.c_str());
}

void Report(const Flags& flags, const Crun& crun, const CrunResults& c, const MoatResults& m,
            const MemoryCgroupMount& mount) {
  struct utsname uts;
  ::uname(&uts);
  std::printf(
      "moat-agent benchmark: %d warm commands, %d cold starts, %d s with 2 clients, "
      "%d idle sandboxes\n",
      flags.commands, flags.cold, flags.seconds, flags.pool);
  std::printf("machine: Linux %s, %ld CPUs online, load average %s", uts.release,
              ::sysconf(_SC_NPROCESSORS_ONLN), ReadFile("/proc/loadavg").c_str());
  std::printf("memory cgroups: %s (%s)\n", mount.path.c_str(), mount.ChargeFile().c_str());
  for (const std::string& note : crun.notes) std::printf("note: %s\n", note.c_str());
  if (!c.skipped.empty()) std::printf("crun skipped: %s\n", c.skipped.c_str());
  std::printf("\n");
  Row("", "moat", "crun", "moat/crun");
  auto lat = [&](const char* what, const Latency& ml, const Latency& cl) {
    auto cell = [](const Latency& l, absl::Duration d) { return l.runs ? Ms(d) : "-"; };
    Row(absl::StrCat(what, " p50 ms"), cell(ml, ml.p50), cell(cl, cl.p50),
        ml.runs && cl.runs ? Ratio(absl::ToDoubleSeconds(ml.p50), absl::ToDoubleSeconds(cl.p50))
                           : "-");
    Row(absl::StrCat(what, " p99 ms"), cell(ml, ml.p99), cell(cl, cl.p99),
        ml.runs && cl.runs ? Ratio(absl::ToDoubleSeconds(ml.p99), absl::ToDoubleSeconds(cl.p99))
                           : "-");
  };
  lat("warm /bin/true", m.warm, c.warm);
  lat("  of which to the first event", m.warm_first_event, Latency{});
  lat("cold start", m.cold, c.cold);
  lat("10 MiB output (64 B lines)", m.stream, c.stream);
  auto mib_s = [](const Latency& l) {
    return l.runs ? absl::StrFormat("%.0f", 10 / absl::ToDoubleSeconds(l.p50)) : "-";
  };
  Row("  MiB/s at p50", mib_s(m.stream), mib_s(c.stream), "");
  // Every line of every stream, or the agent lost output (issue 11: a reader holds the command).
  Row("  lines in the fewest stream",
      absl::StrCat(m.stream_fewest_lines, " of ", kStreamBytes / 64), "-", "");
  Row("commands/s, 2 clients", absl::StrFormat("%.0f", m.throughput.PerSecond()),
      c.skipped.empty() ? absl::StrFormat("%.0f", c.throughput.PerSecond()) : "-",
      c.skipped.empty() ? Ratio(m.throughput.PerSecond(), c.throughput.PerSecond()) : "-");
  const double moat_mem = PerSandbox(m.memory, m.memory.Total());
  const double crun_mem = PerSandbox(c.memory, c.memory.Total());
  Row("memory per idle sandbox KiB", m.memory.error.empty() ? KiB(moat_mem) : "-",
      c.skipped.empty() && c.memory.error.empty() ? KiB(crun_mem) : "-",
      crun_mem > 0 && m.memory.error.empty() ? Ratio(moat_mem, crun_mem) : "-");

  std::printf(
      "\nfailures: moat warm %d, cold %d, 2-client %d, 10 MiB %d; crun warm %d, cold %d, "
      "2-client %d, 10 MiB %d\n",
      m.warm.failed, m.cold.failed, m.throughput.failed, m.stream.failed, c.warm.failed,
      c.cold.failed, c.throughput.failed, c.stream.failed);
  for (const auto& [who, l] :
       {std::pair{"moat warm", &m.warm}, std::pair{"moat cold", &m.cold},
        std::pair{"moat 10 MiB", &m.stream}, std::pair{"crun warm", &c.warm},
        std::pair{"crun cold", &c.cold}, std::pair{"crun 10 MiB", &c.stream}}) {
    if (l->failed) std::printf("  first %s failure: %s\n", who, l->failure.c_str());
  }
  std::printf(
      "2 clients: moat %lld commands in %.2f s; crun %lld in %.2f s\n",
      static_cast<long long>(m.throughput.commands), absl::ToDoubleSeconds(m.throughput.elapsed),
      static_cast<long long>(c.throughput.commands), absl::ToDoubleSeconds(c.throughput.elapsed));

  std::printf("\nmemory per idle sandbox:\n");
  PrintMemoryParts("moat", m.memory);
  if (m.memory.outside_processes == 0) {
    std::printf(
        "    no moat-probe processes: this agent starts no probe yet, so none is counted\n");
  } else {
    std::printf("    %d moat-probe processes\n", m.memory.outside_processes);
  }
  std::printf(
      "    (for scale: the agent itself, Pss %s KiB, shared by all its sandboxes; not "
      "counted)\n",
      KiB(static_cast<double>(m.agent_pss)).c_str());
  if (c.skipped.empty()) PrintMemoryParts("crun", c.memory);

  std::printf("\naims (issue 4):\n");
  auto aim = [](const char* what, bool measured, bool met, const std::string& detail) {
    std::printf("  %-40s %s (%s)\n", what,
                !measured ? "NOT MEASURED"
                : met     ? "met"
                          : "NOT MET",
                detail.c_str());
  };
  const double p50_ms = absl::ToDoubleMilliseconds(m.warm.p50);
  aim("warm /bin/true p50 under 2 ms", m.warm.runs > 0, p50_ms < 2,
      absl::StrFormat("%.2f ms, %.2fx the aim", p50_ms, p50_ms / 2));
  const double rate = m.throughput.PerSecond();
  aim("over 1000 commands/s with 2 clients", m.throughput.commands > 0, rate > 1000,
      absl::StrFormat("%.0f/s, %.2fx the aim", rate, rate / 1000));
  const double mib = moat_mem / (1024 * 1024);
  aim("under 0.5 MiB per idle warm sandbox", m.memory.error.empty() && m.memory.count > 0,
      mib < 0.5, absl::StrFormat("%.2f MiB, %.2fx the aim", mib, mib / 0.5));
}

int Main(int argc, char** argv) {
  std::optional<Flags> parsed = ParseFlags(argc, argv);
  if (!parsed) return 2;
  const Flags& flags = *parsed;
  std::string token(absl::StripAsciiWhitespace(ReadFile(flags.token_file)));
  if (token.empty()) {
    std::fprintf(stderr, "agent_bench: no token in \"%s\"\n", flags.token_file.c_str());
    return 1;
  }
  std::optional<MemoryCgroupMount> mount = FindMemoryCgroupMount(ReadFile("/proc/self/mounts"));
  if (!mount.has_value()) {
    std::fprintf(stderr, "agent_bench: no cgroup hierarchy with the memory controller\n");
    return 1;
  }

  Crun crun;
  crun.binary = flags.crun.empty() ? FindInPath("crun") : flags.crun == "none" ? "" : flags.crun;
  crun.bundle = flags.crun_bundle;
  crun.env = CurrentEnvironment();
  // All crun work first, while this process has one thread (see the top of the file).
  CrunResults c = MeasureCrun(crun, flags, *mount);

  Agent agent(flags, token);
  absl::StatusOr<MoatResults> m = MeasureMoat(agent, *mount);
  if (!m.ok()) {
    std::fprintf(stderr, "agent_bench: %s\n", m.status().ToString().c_str());
    return 1;
  }
  Report(flags, crun, c, *m, *mount);
  return 0;
}

}  // namespace
}  // namespace moat::bench

int main(int argc, char** argv) { return moat::bench::Main(argc, argv); }
