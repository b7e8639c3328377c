// The controller's scheduling, in process: 1000 simulated nodes (the NodeTable the controller
// uses, fed as agents' heartbeats would), 10 000 pending requests placed one after the other as
// the controller places them: snapshot (rebuilt only after a change), filter and score with
// best-of-K, reserve (re-checked under the table's lock). Prints decisions per second and the
// p50/p99 of one decision. docs/performance.md, "Controller scheduling".
//
// usage: scheduler_bench [--nodes N] [--requests N] [--best-of-k K]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/latency_stats.h"
#include "controller/nodes.h"
#include "controller/scheduler/scheduler.h"

namespace {

using moat::controller::NodeReport;
using moat::controller::NodeTable;
using moat::controller::NodeTableOptions;
namespace scheduler = moat::controller::scheduler;

int Flag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int nodes = Flag(argc, argv, "--nodes", 1000);
  const int requests = Flag(argc, argv, "--requests", 10000);
  const int best_of_k = Flag(argc, argv, "--best-of-k", 20);
  constexpr uint64_t kGiB = 1ULL << 30;

  moat::RealClock clock;
  NodeTable table(&clock, NodeTableOptions{});
  std::mt19937_64 rng(42);
  for (int i = 0; i < nodes; ++i) {
    NodeReport r;
    r.agent_url = absl::StrCat("http://10.0.", i / 250, ".", i % 250, ":7070");
    r.agent_token = "bench-token-0123456789";
    r.arch = i % 5 == 0 ? "aarch64" : "x86_64";  // A fifth ARM64, as a mixed fleet.
    r.allocatable = {64, 256 * kGiB, 100000};
    r.profiles = {"default", "python"};
    r.warm = {{"default", static_cast<int>(rng() % 3)}, {"python", static_cast<int>(rng() % 2)}};
    r.labels = {{"zone", absl::StrCat("z", i % 3)}};
    if (i % 50 == 0) r.taints = {{"dedicated", "ci"}};
    auto session = table.Join(absl::StrCat("node-", i), r);
    if (!session.ok()) return 1;
  }
  scheduler::Scheduler s(scheduler::SchedulerOptions{.best_of_k = best_of_k});
  std::vector<absl::Duration> samples;
  samples.reserve(requests);
  int placed = 0, unplaced = 0;
  absl::Time start = absl::Now();
  for (int i = 0; i < requests; ++i) {
    scheduler::SandboxRequest req;
    req.tenant = absl::StrCat("tenant-", i % 20);
    req.profile = i % 3 == 0 ? "python" : "default";
    req.arch = i % 10 == 0 ? "aarch64" : "";
    req.resources = {1, 2 * kGiB, 64};
    absl::Time t0 = absl::Now();
    bool ok = false;
    for (int attempt = 0; attempt < 4 && !ok; ++attempt) {
      scheduler::SnapshotPtr snap = table.Snapshot();
      auto d = s.Schedule(*snap, req, rng());
      if (!d.ok()) break;
      ok = table.Reserve(d->node, req.tenant, req.resources).ok();
    }
    samples.push_back(absl::Now() - t0);
    ok ? ++placed : ++unplaced;
  }
  absl::Duration total = absl::Now() - start;
  std::sort(samples.begin(), samples.end());
  std::printf(
      "scheduler_bench: %d nodes, %d requests, best-of-%d: %d placed, %d unplaced\n"
      "  %.0f decisions/s; one decision (snapshot + filter/score + reserve): p50 %.1f us, "
      "p99 %.1f us, max %.1f us\n",
      nodes, requests, best_of_k, placed, unplaced, requests / absl::ToDoubleSeconds(total),
      absl::ToDoubleMicroseconds(moat::bench::NearestRankPercentile(samples, 50)),
      absl::ToDoubleMicroseconds(moat::bench::NearestRankPercentile(samples, 99)),
      absl::ToDoubleMicroseconds(samples.back()));
  return 0;
}
