// Creates per second end to end through the lifecycle API (docs/performance.md, "Controller
// replicas on etcd"): one moat-controller on SQLite next to 3 replicas on a 3-member etcd, the
// clients spread over the replicas (as behind a load balancer), each with the same 2 real agents
// on loopback; then the failover time from SIGKILL of the leader to the first create that
// succeeds again (median of several). Every process is real (e2e/controller/fleet.h starts
// them); run as root (the agents make real sandboxes), with Debian's etcd installed.
//
//   ha_bench [--clients 4] [--seconds 10] [--failovers 3]
// HA_BENCH_LOGS=1 also prints the end of each replica's log after the etcd run.
// After each run: the writing controller's store calls per create and their mean duration, and
// its own create-to-ready mean (its /metrics), so a slow engine shows where the time goes.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/latency_stats.h"
#include "controller/testing/etcd_cluster.h"
#include "e2e/controller/fleet.h"
#include "httplib.h"

namespace {

using moat::e2e::Fleet;

constexpr char kCreate[] =
    R"({"image": {"uri": "debian:12"}, "entrypoint": ["/bin/sh"], "timeout": 600,
        "resourceLimits": {"cpu": "250m", "memory": "128Mi"}})";

struct Flags {
  int clients = 4;
  int seconds = 10;
  int failovers = 3;
};

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// The sums and counts of the controller's store and create-to-ready histograms on `port`'s
// /metrics ("moat_controller_store_request_duration_seconds_sum{op=\"get\"}" -> seconds).
std::map<std::string, double> Timings(int port) {
  std::map<std::string, double> out;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/metrics");
  if (!r || r->status != 200) return out;
  std::istringstream lines(r->body);
  for (std::string line; std::getline(lines, line);) {
    if (!absl::StartsWith(line, "moat_controller_store_request_duration_seconds_") &&
        !absl::StartsWith(line, "moat_controller_create_to_ready_seconds_")) {
      continue;
    }
    size_t space = line.rfind(' ');
    double v = 0;
    if (space != std::string::npos && absl::SimpleAtod(line.substr(space + 1), &v)) {
      out[line.substr(0, space)] = v;
    }
  }
  return out;
}

// Where a create's time went on the controller at `port` between two Timings: its store calls
// per create and their mean, and the mean create-to-ready the controller itself measured.
void PrintTimings(const char* who, const std::map<std::string, double>& before,
                  const std::map<std::string, double>& after, size_t creates) {
  auto delta = [&](const std::string& key) {
    auto a = after.find(key), b = before.find(key);
    return (a == after.end() ? 0 : a->second) - (b == before.end() ? 0 : b->second);
  };
  std::printf("  %s:", who);
  for (const char* op : {"get", "list", "commit"}) {
    const std::string labels = absl::StrCat("{op=\"", op, "\"}");
    double n = delta("moat_controller_store_request_duration_seconds_count" + labels);
    double sum = delta("moat_controller_store_request_duration_seconds_sum" + labels);
    if (n > 0) {
      std::printf(" store %s %.2f per create, mean %.2f ms;", op, creates ? n / creates : 0,
                  1000 * sum / n);
    }
  }
  for (const char* start : {"warm", "cold"}) {
    const std::string labels = absl::StrCat("{start=\"", start, "\"}");
    double n = delta("moat_controller_create_to_ready_seconds_count" + labels);
    double sum = delta("moat_controller_create_to_ready_seconds_sum" + labels);
    if (n > 0) std::printf(" create to ready (%s) mean %.2f ms;", start, 1000 * sum / n);
  }
  std::printf("\n");
}

// `call(client, method, path, body)` is one API call from client number `client`.
using Call = std::function<std::pair<int, nlohmann::json>(int, const std::string&,
                                                          const std::string&, const std::string&)>;

// Clients that create (and then delete) as fast as the fleet answers, for `seconds`.
// `timed_port`: the controller whose store timings are printed (the one that writes).
double CreatesPerSecond(const char* what, const Flags& f, const Call& call, int timed_port) {
  const std::map<std::string, double> timings_before = Timings(timed_port);
  std::mutex mu;
  std::vector<absl::Duration> latencies;
  std::atomic<int> failed{0};
  std::string first_failure;
  // Per client (each talks to one replica): a replica that refuses while the others serve
  // shows here, not in the totals.
  std::vector<int> served(f.clients, 0), refused(f.clients, 0);
  std::vector<absl::Duration> last_refused(f.clients);
  const absl::Time start = absl::Now(), end = start + absl::Seconds(f.seconds);
  std::vector<std::thread> clients;
  for (int c = 0; c < f.clients; ++c) {
    clients.emplace_back([&, c] {
      while (absl::Now() < end) {
        absl::Time t0 = absl::Now();
        auto [status, sb] = call(c, "POST", "/v1/sandboxes", kCreate);
        absl::Duration took = absl::Now() - t0;
        if (status != 202 || !sb.is_object() || sb["status"]["state"] != "Running") {
          ++failed;
          std::lock_guard lock(mu);
          ++refused[c];
          last_refused[c] = absl::Now() - start;
          if (first_failure.empty()) {
            first_failure = absl::StrCat("client ", c, ": ", status, " ", sb.dump());
          }
          continue;
        }
        {
          std::lock_guard lock(mu);
          latencies.push_back(took);
          ++served[c];
        }
        call(c, "DELETE", "/v1/sandboxes/" + sb["id"].get<std::string>(), "");
      }
    });
  }
  for (auto& t : clients) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const std::map<std::string, double> timings_after = Timings(timed_port);
  std::sort(latencies.begin(), latencies.end());
  const double rate = latencies.size() / seconds;
  std::printf(
      "%-44s %5zu creates in %.1f s = %6.1f creates/s  p50 %6.2f ms  p99 %7.2f ms  (%d failed)\n",
      what, latencies.size(), seconds, rate,
      latencies.empty() ? 0 : Ms(moat::bench::NearestRankPercentile(latencies, 50)),
      latencies.empty() ? 0 : Ms(moat::bench::NearestRankPercentile(latencies, 99)), failed.load());
  for (int c = 0; c < f.clients; ++c) {
    std::printf("  client %d: %d created, %d failed", c, served[c], refused[c]);
    if (refused[c] > 0)
      std::printf(" (the last at %.1f s)", absl::ToDoubleSeconds(last_refused[c]));
    std::printf("\n");
  }
  if (!first_failure.empty()) std::printf("  the first failure: %s\n", first_failure.c_str());
  PrintTimings("the writing controller", timings_before, timings_after, latencies.size());
  return rate;
}

bool WaitReady(Fleet& fleet) {
  return Fleet::WaitFor(
      [&] { return fleet.NodeState("a1") == "Ready" && fleet.NodeState("a2") == "Ready"; },
      absl::Seconds(30));
}

double Sqlite(const Flags& f) {
  auto fleet = Fleet::Create();
  if (!fleet.ok() || !(*fleet)->StartController().ok()) return -1;
  for (const char* name : {"a1", "a2"}) {
    if (!(*fleet)->StartAgent({.name = name, .pool_floor = 2}).ok()) return -1;
  }
  Fleet& fl = **fleet;
  return CreatesPerSecond(
      "1 controller, SQLite:", f,
      [&](int, const std::string& m, const std::string& p, const std::string& b) {
        return fl.Call(m, p, b);
      },
      fl.controller().port());
}

int Leader(Fleet& fleet, const std::vector<bool>& alive) {
  for (int i = 0; i < 3; ++i) {
    if (!alive[i]) continue;
    httplib::Client c("127.0.0.1", fleet.replica(i).port());
    c.set_read_timeout(2, 0);
    auto r = c.Get("/metrics");
    if (r && r->status == 200 && absl::StrContains(r->body, "\nmoat_controller_leader 1")) {
      return i;
    }
  }
  return -1;
}

double Etcd(const Flags& f) {
  moat::controller::testing::EtcdCluster etcd(3);
  if (!etcd.Start().ok()) {
    std::fprintf(stderr, "etcd did not start: logs in %s\n", etcd.dir().c_str());
    return -1;
  }
  auto created = Fleet::Create();
  if (!created.ok()) return -1;
  Fleet& fleet = **created;
  std::vector<bool> alive = {true, true, true};
  for (int i = 0; i < 3; ++i) {
    if (!fleet.StartReplica(i, etcd.Endpoints()).ok()) return -1;
  }
  if (!Fleet::WaitFor([&] { return Leader(fleet, alive) >= 0; }, absl::Seconds(20))) return -1;
  for (const char* name : {"a1", "a2"}) {
    if (!fleet.StartAgent({.name = name, .pool_floor = 2}).ok()) return -1;
  }
  double rate = CreatesPerSecond(
      "3 replicas on etcd (3 members), spread:", f,
      [&](int c, const std::string& m, const std::string& p, const std::string& b) {
        return fleet.CallReplica(c % 3, m, p, b);
      },
      fleet.replica(Leader(fleet, alive)).port());

  if (std::getenv("HA_BENCH_LOGS") != nullptr) {
    for (int i = 0; i < 3; ++i) {
      std::string log = fleet.replica(i).Log();
      std::printf("--- replica %d (leader %d):\n%s\n", i, Leader(fleet, alive) == i,
                  log.substr(log.size() > 3000 ? log.size() - 3000 : 0).c_str());
    }
  }
  // Failover: SIGKILL of the leader, then creates through the other replicas until one is
  // Running; the killed replica is started again at once (as a supervisor would), so the
  // agents, which reach the fleet through replica 0, are never cut off for long.
  std::vector<double> failovers;
  for (int k = 0; k < f.failovers; ++k) {
    if (!WaitReady(fleet)) break;
    const int leader = Leader(fleet, alive);
    if (leader < 0) break;
    const absl::Time killed = absl::Now();
    fleet.replica(leader).Kill(SIGKILL);
    alive[leader] = false;
    if (!fleet.StartReplica(leader, etcd.Endpoints()).ok()) break;
    alive[leader] = true;
    const int other = (leader + 1) % 3;
    bool ok = Fleet::WaitFor(
        [&] {
          auto [status, sb] = fleet.CallReplica(other, "POST", "/v1/sandboxes", kCreate);
          if (status == 202 && sb["status"]["state"] == "Running") {
            fleet.CallReplica(other, "DELETE", "/v1/sandboxes/" + sb["id"].get<std::string>());
            return true;
          }
          return false;
        },
        absl::Seconds(60));
    if (!ok) break;
    failovers.push_back(absl::ToDoubleSeconds(absl::Now() - killed));
    std::printf("failover %d: SIGKILL of the leader to the next Running create: %.2f s\n", k + 1,
                failovers.back());
  }
  if (!failovers.empty()) {
    std::sort(failovers.begin(), failovers.end());
    std::printf("failover median of %zu: %.2f s (lease TTL 6 s)\n", failovers.size(),
                failovers[failovers.size() / 2]);
  }
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--clients") {
      f.clients = v;
    } else if (k == "--seconds") {
      f.seconds = v;
    } else if (k == "--failovers") {
      f.failovers = v;
    } else {
      std::fprintf(stderr, "usage: ha_bench [--clients N] [--seconds S] [--failovers N]\n");
      return 2;
    }
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "ha_bench: the agents make real sandboxes: run as root\n");
    return 2;
  }
  if (!moat::controller::testing::EtcdInstalled()) {
    std::fprintf(stderr, "ha_bench: etcd is not installed (scripts/install-deps.sh)\n");
    return 2;
  }
  std::printf("%d clients, create (answered Running) + delete, %d s each:\n", f.clients, f.seconds);
  const double sqlite = Sqlite(f);
  const double etcd = Etcd(f);
  if (sqlite <= 0 || etcd <= 0) {
    std::fprintf(stderr, "ha_bench: a fleet did not start\n");
    return 1;
  }
  std::printf("etcd / SQLite: %.2f\n", etcd / sqlite);
  return 0;
}
