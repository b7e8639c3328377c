// The controller's store under a create storm, and leader failover (docs/performance.md,
// "Controller replicas on etcd"): creates/s and commit latency p50/p99 of one sandbox record
// each (a precondition "absent" and a put, as SandboxManager writes them) from W concurrent
// writers, on SQLite (the embedded default, WAL) next to etcd (3 members on loopback, fenced
// writes as the leader makes them); then the time from SIGKILL of a leader to a write of the
// next leader, median of several (lease TTL 15 s, the default).
//   build/bin/store_bench [--writers=16] [--seconds=5] [--failovers=3] [--ttl=15]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/latency_stats.h"
#include "controller/leader/leader_elector.h"
#include "controller/store/etcd_store.h"
#include "controller/store/sqlite_store.h"
#include "controller/testing/etcd_cluster.h"

namespace moat::controller {
namespace {

struct Result {
  double per_second = 0;
  absl::Duration p50, p99;
  int64_t errors = 0;
};

Result Storm(Store& store, int writers, absl::Duration length, const std::string& tag) {
  std::vector<std::vector<absl::Duration>> samples(writers);
  std::atomic<int64_t> errors{0};
  absl::Time end = absl::Now() + length;
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      std::string record(600, 'r');  // About a sandbox record's size.
      for (int i = 0; absl::Now() < end; ++i) {
        std::string key = absl::StrCat("sandboxes/", tag, "-", w, "-", i);
        absl::Time start = absl::Now();
        auto r = store.Commit(WriteBatch().Require(key, 0).Put(key, record));
        if (r.ok()) {
          samples[w].push_back(absl::Now() - start);
        } else {
          ++errors;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<absl::Duration> all;
  for (auto& s : samples) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  Result r;
  r.per_second = all.size() / absl::ToDoubleSeconds(length);
  r.p50 = bench::NearestRankPercentile(all, 50);
  r.p99 = bench::NearestRankPercentile(all, 99);
  r.errors = errors;
  return r;
}

void Print(const char* name, const Result& r) {
  std::printf("%-34s %9.0f creates/s  p50 %8.2f ms  p99 %8.2f ms  errors %lld\n", name,
              r.per_second, absl::ToDoubleMilliseconds(r.p50), absl::ToDoubleMilliseconds(r.p99),
              static_cast<long long>(r.errors));
}

// A child process leads; the parent waits as candidate, kills the child with SIGKILL and times
// until its own fenced write succeeds.
absl::Duration Failover(const std::vector<std::string>& endpoints, absl::Duration ttl) {
  LeaderElectorOptions options{.identity = "child",
                               .lease_ttl = ttl,
                               .renew_interval = ttl / 7,
                               .renew_deadline = ttl * 2 / 3};
  int ready[2];
  if (pipe(ready) != 0) return absl::InfiniteDuration();
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    auto c = EtcdClient::Create({.endpoints = endpoints});
    LeaderElector a(c->get(), options);
    a.Start();
    while (!a.IsLeader()) absl::SleepFor(absl::Milliseconds(20));
    char b = 1;
    if (write(ready[1], &b, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char b;
  if (read(ready[0], &b, 1) != 1) return absl::InfiniteDuration();
  close(ready[0]);
  auto c = EtcdClient::Create({.endpoints = endpoints});
  options.identity = "parent";
  LeaderElector e(c->get(), options);
  auto store = EtcdStore::Open(c->get(), {.fence = [&] { return e.CurrentFence(); }});
  e.Start();
  absl::SleepFor(absl::Milliseconds(500));
  absl::Time killed = absl::Now();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  while (!(*store)->Commit(WriteBatch().Put("sandboxes/after-failover", "x")).ok()) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::Duration took = absl::Now() - killed;
  e.Stop();
  return took;
}

int Main(int argc, char** argv) {
  int writers = 16, seconds = 5, failovers = 3, ttl = 15;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    auto value = [&](absl::string_view flag, int* out) {
      if (absl::ConsumePrefix(&a, flag)) (void)absl::SimpleAtoi(a, out);
    };
    value("--writers=", &writers);
    value("--seconds=", &seconds);
    value("--failovers=", &failovers);
    value("--ttl=", &ttl);
  }
  if (!testing::EtcdInstalled()) {
    std::fprintf(stderr, "store_bench: /usr/bin/etcd missing: scripts/install-deps.sh\n");
    return 1;
  }
  char tmpl[] = "/var/tmp/moat-store-bench-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  auto sqlite = SqliteStore::Open(dir + "/controller.db");
  Result s = Storm(**sqlite, writers, absl::Seconds(seconds), "s");
  testing::EtcdCluster cluster(3);
  if (!cluster.Start().ok()) {
    std::fprintf(stderr, "store_bench: etcd did not start (logs in %s)\n", cluster.dir().c_str());
    return 1;
  }
  auto client = EtcdClient::Create({.endpoints = cluster.Endpoints()});
  LeaderElector leader(client->get(), {.identity = "bench"});
  leader.Start();
  while (!leader.IsLeader()) absl::SleepFor(absl::Milliseconds(20));
  auto etcd = EtcdStore::Open(client->get(), {.fence = [&] { return leader.CurrentFence(); }});
  Result e = Storm(**etcd, writers, absl::Seconds(seconds), "e");
  leader.Stop();
  std::printf("%d writers, %d s each, one record (precondition + put) per create\n", writers,
              seconds);
  Print("sqlite (embedded, WAL, NORMAL)", s);
  Print("etcd (3 members, fenced, grouped)", e);
  std::printf("etcd/sqlite create rate: %.2f\n", e.per_second / s.per_second);
  std::vector<absl::Duration> times;
  for (int i = 0; i < failovers; ++i) {
    times.push_back(Failover(cluster.Endpoints(), absl::Seconds(ttl)));
    std::printf("failover %d: %.2f s\n", i + 1, absl::ToDoubleSeconds(times.back()));
  }
  if (!times.empty()) {
    bench::LatencySummary f = bench::Summarize(times);
    std::printf(
        "failover (SIGKILL of the leader to the next leader's first write, lease %d s): "
        "median %.2f s, max %.2f s\n",
        ttl, absl::ToDoubleSeconds(f.median), absl::ToDoubleSeconds(f.max));
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace moat::controller

int main(int argc, char** argv) { return moat::controller::Main(argc, argv); }
