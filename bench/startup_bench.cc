// startup_bench: start-to-finish latency of `moat run -- COMMAND` against bubblewrap, crun and a
// plain fork+exec of COMMAND, for COMMAND = /bin/true and python3 -c pass.
//
// Every case runs once per round, round-robin (the starting case rotates each round), so that
// machine noise hits all cases alike; a run is timed from just before posix_spawn to waitpid's
// return on the monotonic clock. Peers that are missing or fail their first run are skipped with
// a note; moat is never skipped: if its first run fails, the bench fails. Runs that fail later are
// counted in the table and left out of the times. bench/run.sh builds this, installs the peers,
// prepares crun's bundle and runs it; `startup_bench --help` lists the flags.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/bench_report.h"
#include "bench/crun_config.h"
#include "bench/crun_view.h"
#include "bench/latency_stats.h"
#include "bench/moat_trace.h"
#include "bench/timed_run.h"
#include "util/self_path.h"

namespace moat::bench {
namespace {

constexpr char kUsage[] = R"(usage: startup_bench [FLAGS]

Times `moat run -- COMMAND` against bubblewrap, crun and plain fork+exec of COMMAND, for
COMMAND = /bin/true and PYTHON -c pass, interleaved round-robin, and prints medians, p90 and
ratios, then moat's own setup timeline (MOAT_TRACE=1). bench/run.sh prepares everything.

  --rounds=N          timed rounds; each runs every case once (default 50)
  --warmup=N          untimed rounds first, at least 1: the first one checks every case (default 2)
  --moat=PATH         moat binary (default: "moat" beside this program)
  --moat-b=PATH       another moat build, timed as runner "moat-b" in the same rounds (A/B)
  --bwrap=PATH|none   bubblewrap (default: bwrap from PATH)
  --crun=PATH|none    crun (default: crun from PATH)
  --crun-bundle=DIR   OCI bundle for crun: DIR/config.json and an empty DIR/rootfs; without it
                      crun is skipped (bench/run.sh makes one)
  --python=PATH       the Python for the second command (default /usr/bin/python3)
  --order=rotate|shuffle
                      rotate (default): every round in the same cyclic order, starting one case
                      further along, so each case nearly always follows the same one; shuffle:
                      a new order every round (fixed seed), so what ran just before (its
                      leftover kernel work: namespaces and cgroups being torn down) varies
)";

struct Flags {
  int rounds = 50;
  int warmup = 2;
  std::string moat;
  std::string moat_b;
  std::string bwrap;
  std::string crun;
  std::string crun_bundle;
  std::string python = "/usr/bin/python3";
  bool shuffle = false;
};

// One (command, runner) pair and its samples.
struct Case {
  std::string command;
  std::string runner;
  std::function<RunSpec(int seq)> make;
  std::function<void(int seq)> after_failure;  // best-effort cleanup of a failed run, untimed
  bool required = false;                       // moat: a failure ends the bench
  std::string skipped;
  std::vector<absl::Duration> samples;
  int failed = 0;       // timed runs that failed
  std::string failure;  // the first one's reason
};

struct Command {
  std::string label;
  std::vector<std::string> argv;
};

std::optional<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    auto value_of = [&](absl::string_view name, std::string* out) {
      if (!absl::ConsumePrefix(&arg, name)) return false;
      *out = std::string(arg);
      return true;
    };
    std::string number;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (value_of("--rounds=", &number)) {
      if (!absl::SimpleAtoi(number, &flags.rounds) || flags.rounds < 1) {
        std::fprintf(stderr, "startup_bench: --rounds wants a whole number >= 1, not \"%s\"\n",
                     number.c_str());
        return std::nullopt;
      }
    } else if (value_of("--warmup=", &number)) {
      if (!absl::SimpleAtoi(number, &flags.warmup) || flags.warmup < 1) {
        std::fprintf(stderr, "startup_bench: --warmup wants a whole number >= 1, not \"%s\"\n",
                     number.c_str());
        return std::nullopt;
      }
    } else if (value_of("--order=", &number)) {
      if (number != "rotate" && number != "shuffle") {
        std::fprintf(stderr, "startup_bench: --order is rotate or shuffle, not \"%s\"\n",
                     number.c_str());
        return std::nullopt;
      }
      flags.shuffle = number == "shuffle";
    } else if (value_of("--moat=", &flags.moat) || value_of("--moat-b=", &flags.moat_b) ||
               value_of("--bwrap=", &flags.bwrap) || value_of("--crun=", &flags.crun) ||
               value_of("--crun-bundle=", &flags.crun_bundle) ||
               value_of("--python=", &flags.python)) {
    } else {
      std::fprintf(stderr, "startup_bench: unknown argument \"%s\" (see --help)\n", argv[i]);
      return std::nullopt;
    }
  }
  return flags;
}

std::string FirstLine(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  return std::string(text.substr(0, text.find('\n')));
}

// The first line a tool prints for `--version`, or "" when it prints nothing or fails.
std::string VersionOf(const std::string& tool) {
  absl::StatusOr<RunOutcome> out = TimedRun({{tool, "--version"}, CurrentEnvironment()});
  return out.ok() && Succeeded(*out) ? FirstLine(out->output) : "";
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Why a run failed, in one line: the wait status and the first line of what it printed.
std::string FailureOf(const absl::StatusOr<RunOutcome>& outcome) {
  if (!outcome.ok()) return std::string(outcome.status().message());
  std::string why = DescribeWaitStatus(outcome->wait_status);
  if (std::string line = FirstLine(outcome->output); !line.empty()) {
    absl::StrAppend(&why, ": ", line);
  }
  return why;
}

// Runs every case once per round, starting one case further along each round. The first
// warm-up round is the check: a peer that fails it is skipped, and if moat fails it the bench
// stops (returns false), having nothing to compare against. Later failures are counted (timed
// rounds) and left out of the times, for moat and peers alike.
bool RunRounds(std::vector<Case>& cases, const Flags& flags) {
  int seq = 0;
  const int n = static_cast<int>(cases.size());
  std::mt19937 random(20261130);  // fixed: the same orders every time
  std::vector<int> order(n);
  for (int round = -flags.warmup; round < flags.rounds; ++round) {
    for (int i = 0; i < n; ++i) order[i] = ((i + round) % n + n) % n;
    // The first warm-up round keeps the listed order: it checks moat first.
    if (flags.shuffle && round > -flags.warmup) std::shuffle(order.begin(), order.end(), random);
    for (int i = 0; i < n; ++i) {
      Case& c = cases[order[i]];
      if (!c.skipped.empty()) continue;
      const int this_seq = seq++;
      absl::StatusOr<RunOutcome> outcome = TimedRun(c.make(this_seq));
      if (outcome.ok() && Succeeded(*outcome)) {
        if (round >= 0) c.samples.push_back(outcome->elapsed);
        continue;
      }
      if (c.after_failure) c.after_failure(this_seq);
      if (round == -flags.warmup) {
        if (c.required) {
          std::fprintf(stderr, "startup_bench: %s does not work: `%s` failed: %s\n",
                       c.runner.c_str(), c.command.c_str(), FailureOf(outcome).c_str());
          if (outcome.ok()) std::fprintf(stderr, "%s\n", outcome->output.c_str());
          return false;
        }
        c.skipped = absl::StrCat("failed its first run: ", FailureOf(outcome));
      } else if (round >= 0) {
        if (c.failed++ == 0) c.failure = FailureOf(outcome);
        std::fprintf(stderr, "startup_bench: %s on `%s` failed in round %d: %s\n", c.runner.c_str(),
                     c.command.c_str(), round + 1, FailureOf(outcome).c_str());
      }
    }
    if (round >= 0 && ((round + 1) % 10 == 0 || round + 1 == flags.rounds)) {
      std::fprintf(stderr, "startup_bench: %d/%d rounds\n", round + 1, flags.rounds);
    }
  }
  return true;
}

std::vector<std::string> Concat(std::vector<std::string> head,
                                const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// What every runner needs, made once.
struct Setup {
  Flags flags;
  std::vector<Command> commands;
  std::vector<std::string> env;           // for every timed run
  std::optional<CrunView> crun_view;      // crun's mount namespace
  std::vector<std::string> crun_configs;  // one per command, same order
  std::vector<std::string> notes;         // printed above the table
};

// One way to start a command.
struct Runner {
  std::string name;
  std::string shown;  // its command line, for the report
  std::function<RunSpec(const Command&, int seq)> make;
  std::function<void(int seq)> after_failure;
  std::string skipped;
};

// The bubblewrap command line under comparison, exactly.
constexpr char kBwrapFlags[] =
    "--unshare-all --die-with-parent --new-session --ro-bind / / --tmpfs /tmp --proc /proc "
    "--dev /dev";

Runner MoatRunner(const Setup& setup, const std::string& name, const std::string& binary) {
  const std::vector<std::string> prefix = {binary, "run", "--"};
  return {name, absl::StrCat(absl::StrJoin(prefix, " "), " COMMAND"),
          [&setup, prefix](const Command& c, int) {
            return RunSpec{Concat(prefix, c.argv), setup.env};
          }};
}

Runner BwrapRunner(const Setup& setup) {
  std::vector<std::string> prefix = {setup.flags.bwrap};
  for (absl::string_view flag : absl::StrSplit(kBwrapFlags, ' ')) prefix.emplace_back(flag);
  Runner r{"bwrap", absl::StrCat(absl::StrJoin(prefix, " "), " COMMAND"),
           [&setup, prefix](const Command& c, int) {
             return RunSpec{Concat(prefix, c.argv), setup.env};
           }};
  if (setup.flags.bwrap.empty()) {
    r.skipped = "bwrap not found (apt-get install bubblewrap, or --bwrap=PATH)";
  }
  return r;
}

// Writes crun's per-command configs and prepares its mount namespace (crun_view.h); the reason
// crun cannot run, or "".
std::string PrepareCrun(Setup& setup) {
  const Flags& flags = setup.flags;
  if (flags.crun.empty()) return "crun not found (apt-get install crun, or --crun=PATH)";
  if (flags.crun_bundle.empty()) return "no --crun-bundle (bench/run.sh prepares one)";
  for (size_t i = 0; i < setup.commands.size(); ++i) {
    setup.crun_configs.push_back(absl::StrCat(flags.crun_bundle, "/config.", i, ".json"));
    absl::Status written = WriteCrunConfig(absl::StrCat(flags.crun_bundle, "/config.json"),
                                           setup.commands[i].argv, setup.crun_configs.back());
    if (!written.ok()) return std::string(written.message());
  }
  absl::StatusOr<CrunView> view = PrepareCrunView(absl::StrCat(flags.crun_bundle, "/rootfs"));
  if (!view.ok()) {
    return absl::StrCat("cannot prepare crun's mount namespace: ", view.status().message());
  }
  setup.crun_view = std::move(*view);
  setup.notes.insert(setup.notes.end(), setup.crun_view->notes.begin(),
                     setup.crun_view->notes.end());
  setup.notes.push_back(
      "crun = --cgroup-manager=cgroupfs (a v1 cgroup per container, as moat makes one); "
      "crun-nocg = --cgroup-manager=disabled (no cgroup at all)");
  return "";
}

// crun with the cgroup manager `manager`; each run is a new container, "moat-bench-PID-SEQ".
Runner CrunRunner(const Setup& setup, const std::string& name, const std::string& manager,
                  const std::string& skipped) {
  const std::string state = "--root=" + setup.flags.crun_bundle + "/state";
  const std::vector<std::string> prefix = {setup.flags.crun, state, "--cgroup-manager=" + manager,
                                           "run", "--bundle=" + setup.flags.crun_bundle};
  auto id = [](int seq) { return absl::StrCat("moat-bench-", ::getpid(), "-", seq); };
  auto ns = [&setup] { return setup.crun_view ? setup.crun_view->mount_ns.get() : -1; };
  Runner r;
  r.name = name;
  r.shown = absl::StrCat(absl::StrJoin(prefix, " "), " --config=CONFIG moat-bench-PID-SEQ");
  r.make = [&setup, prefix, id, ns](const Command& c, int seq) {
    std::string config;
    for (size_t i = 0; i < setup.commands.size(); ++i) {
      if (setup.commands[i].label == c.label) config = setup.crun_configs[i];
    }
    return RunSpec{Concat(prefix, {"--config=" + config, id(seq)}), setup.env, ns()};
  };
  // A crun that failed half-way can leave its state and cgroups behind; this removes them.
  r.after_failure = [&setup, state, id, ns](int seq) {
    (void)TimedRun({{setup.flags.crun, state, "delete", "--force", id(seq)}, setup.env, ns()});
  };
  r.skipped = skipped;
  return r;
}

Runner ForkExecRunner(const Setup& setup) {
  return {"fork+exec", "COMMAND", [&setup](const Command& c, int) {
            return RunSpec{c.argv, setup.env};
          }};
}

// moat's own timeline: one extra run per command with MOAT_TRACE=1, after the timed rounds.
std::string TraceMoat(const Setup& setup) {
  std::string out;
  for (const Command& command : setup.commands) {
    RunSpec spec{Concat({setup.flags.moat, "run", "--"}, command.argv),
                 CurrentEnvironment({}, {"MOAT_TRACE=1"})};
    absl::StatusOr<RunOutcome> traced = TimedRun(spec);
    if (!traced.ok() || !Succeeded(*traced)) {
      absl::StrAppend(&out, "moat run -- ", command.label,
                      " with MOAT_TRACE=1 failed: ", FailureOf(traced), "\n");
      continue;
    }
    const std::vector<TracePhase> phases = ParseMoatTrace(traced->output);
    absl::StrAppend(&out, "moat's setup timeline, one run of `moat run -- ", command.label,
                    "` with MOAT_TRACE=1:\n");
    absl::StrAppend(&out, phases.empty() ? "  (no trace lines; does this moat know MOAT_TRACE?)\n"
                                         : FormatTrace(phases, traced->elapsed));
  }
  return out;
}

void PrintHeader(const Setup& setup, const std::vector<Runner>& runners, size_t cases) {
  const Flags& flags = setup.flags;
  struct utsname uts;
  ::uname(&uts);
  std::printf("moat start-up benchmark: %d rounds (after %d warm-up), %s over %zu cases\n",
              flags.rounds, flags.warmup,
              flags.shuffle ? "a shuffled order each round" : "round-robin", cases);
  std::printf("machine: Linux %s, %ld CPUs online, load average at the end %s\n", uts.release,
              ::sysconf(_SC_NPROCESSORS_ONLN), ReadSmallFile("/proc/loadavg").c_str());
  std::printf("versions: %s", VersionOf(flags.moat).c_str());
  if (!flags.bwrap.empty()) std::printf("; %s", VersionOf(flags.bwrap).c_str());
  if (!flags.crun.empty()) std::printf("; %s", VersionOf(flags.crun).c_str());
  std::printf("; %s\n", VersionOf(flags.python).c_str());
  std::printf("runners (COMMAND = the command under test):\n");
  for (const Runner& r : runners) {
    if (r.skipped.empty()) std::printf("  %-10s %s\n", r.name.c_str(), r.shown.c_str());
  }
  for (const std::string& note : setup.notes) std::printf("note: %s\n", note.c_str());
  std::printf("\n");
}

int Main(int argc, char** argv) {
  std::optional<Flags> parsed = ParseFlags(argc, argv);
  if (!parsed) return 2;
  Setup setup;
  setup.flags = std::move(*parsed);
  Flags& flags = setup.flags;
  if (flags.moat.empty()) flags.moat = BesideThisProgram("moat");
  if (flags.bwrap.empty()) flags.bwrap = FindInPath("bwrap");
  if (flags.crun.empty()) flags.crun = FindInPath("crun");
  if (flags.bwrap == "none") flags.bwrap.clear();
  if (flags.crun == "none") flags.crun.clear();
  if (::access(flags.moat.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "startup_bench: no moat binary at \"%s\"; build it (ninja -C build moat) or pass "
                 "--moat=PATH\n",
                 flags.moat.c_str());
    return 1;
  }
  if (!flags.moat_b.empty() && ::access(flags.moat_b.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "startup_bench: --moat-b: no executable at \"%s\"\n",
                 flags.moat_b.c_str());
    return 1;
  }
  setup.commands = {
      {"/bin/true", {"/bin/true"}},
      {absl::StrCat(flags.python, " -c pass"), {flags.python, "-c", "pass"}},
  };
  // No timed run inherits a MOAT_TRACE from the caller: the tracing would be timed too.
  setup.env = CurrentEnvironment({"MOAT_TRACE"});

  const std::string crun_skipped = PrepareCrun(setup);
  std::vector<Runner> runners = {MoatRunner(setup, kMoatRunner, flags.moat)};
  if (!flags.moat_b.empty()) runners.push_back(MoatRunner(setup, "moat-b", flags.moat_b));
  runners.push_back(BwrapRunner(setup));
  runners.push_back(CrunRunner(setup, "crun", "cgroupfs", crun_skipped));
  runners.push_back(CrunRunner(setup, "crun-nocg", "disabled", crun_skipped));
  runners.push_back(ForkExecRunner(setup));
  std::vector<Case> cases;
  for (const Command& command : setup.commands) {
    for (const Runner& runner : runners) {
      Case c;
      c.command = command.label;
      c.runner = runner.name;
      c.make = [&runner, &command](int seq) { return runner.make(command, seq); };
      c.after_failure = runner.after_failure;
      c.required = runner.name == kMoatRunner;
      c.skipped = runner.skipped;
      cases.push_back(std::move(c));
    }
  }

  std::fprintf(stderr, "startup_bench: %d warm-up + %d timed rounds of %zu cases\n", flags.warmup,
               flags.rounds, cases.size());
  if (!RunRounds(cases, flags)) return 1;
  const std::string traces = TraceMoat(setup);

  PrintHeader(setup, runners, cases.size());
  std::vector<CaseResult> results;
  for (const Case& c : cases) {
    results.push_back({c.command, c.runner, Summarize(c.samples), c.failed, c.failure, c.skipped});
  }
  std::printf("%s\n%s", FormatResultTable(results).c_str(), traces.c_str());
  return 0;
}

}  // namespace
}  // namespace moat::bench

int main(int argc, char** argv) { return moat::bench::Main(argc, argv); }
