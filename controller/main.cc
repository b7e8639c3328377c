// moat-controller: the fleet's one endpoint. main only wires the parts together and runs the
// one-second tick (node states, expiry); each part lives in its own file.
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "controller/agent_client.h"
#include "controller/config.h"
#include "controller/http_api.h"
#include "controller/leader/forwarder.h"
#include "controller/leader/leader_elector.h"
#include "controller/metered_store.h"
#include "controller/metrics.h"
#include "controller/nodes.h"
#include "controller/precheck/approvals.h"
#include "controller/sandboxes.h"
#include "controller/scheduler/scheduler.h"
#include "controller/store/etcd_store.h"
#include "controller/store/memory_store.h"
#include "controller/store/sqlite_store.h"
#include "util/http/client_pool.h"
#include "util/log.h"
#include "util/token.h"

namespace moat::controller {
namespace {

constexpr char kUsage[] =
    "usage: moat-controller [--config FILE]\n"
    "  --config FILE  the controller's YAML configuration (default /etc/moat/controller.yaml;\n"
    "                 docs/controller.md lists every key)\n"
    "  --version      print the version\n"
    "  --help         this text\n"
    "The API listens on 127.0.0.1:8080 unless listen: says otherwise; state (SQLite) lives in\n"
    "/var/lib/moat-controller unless state_dir: says otherwise.\n";

// "${NAME}" replaced by the environment variable NAME (empty if unset): advertise_url may name
// the pod's IP, which only the pod knows (charts/moat sets POD_IP).
std::string ExpandEnv(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    size_t end = text.find('}', i);
    if (text.compare(i, 2, "${") == 0 && end != std::string::npos) {
      const char* value = std::getenv(text.substr(i + 2, end - i - 2).c_str());
      out += value ? value : "";
      i = end;
    } else {
      out += text[i];
    }
  }
  return out;
}

int Run(int argc, char** argv) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string config_path = kDefaultConfigPath;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg == "--version") {
      std::printf("moat-controller %s\n", MOAT_VERSION);
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  absl::StatusOr<ControllerConfig> config = LoadConfig(config_path);
  if (!config.ok()) {
    LogError(config.status().message());
    return 1;
  }
  absl::StatusOr<std::string> join_token = ReadTokenFile(config->join_token_file);
  if (!join_token.ok()) {
    LogError(absl::StrCat("the join token (join_token_file): ", join_token.status().message()));
    return 1;
  }
  std::vector<ApiKey> api_keys;
  if (!config->api_keys_file.empty()) {
    absl::StatusOr<std::vector<ApiKey>> keys = LoadApiKeys(config->api_keys_file);
    if (!keys.ok()) {
      LogError(keys.status().message());
      return 1;
    }
    api_keys = *std::move(keys);
  } else {
    LogWarning("no api_keys_file: the API takes requests without a key (tenant \"default\")");
  }

  // With etcd, several replicas share the store and elect a leader; otherwise this one leads.
  std::unique_ptr<EtcdClient> etcd;
  std::unique_ptr<LeaderElector> elector;
  std::unique_ptr<Store> store;
  std::string self;  // This replica's URL for the others (etcd store).
  if (config->store == StoreKind::kEtcd) {
    absl::StatusOr<std::unique_ptr<EtcdClient>> client =
        EtcdClient::Create({.endpoints = config->etcd.endpoints,
                            .ca_file = config->etcd.ca_file,
                            .cert_file = config->etcd.cert_file,
                            .key_file = config->etcd.key_file});
    if (!client.ok()) {
      LogError(client.status().message());
      return 1;
    }
    etcd = *std::move(client);
    const LeaderElectionConfig& le = config->leader_election;
    self = ExpandEnv(le.advertise_url);
    if (self.empty() && config->port != 0) {
      self = absl::StrCat(config->tls_cert_file.empty() ? "http://" : "https://",
                          config->listen_address, ":", config->port);
    }
    if (self.empty()) {
      LogError(
          "store: etcd with listen.port 0 needs leader_election.advertise_url (the URL other "
          "replicas forward writes to)");
      return 1;
    }
    elector = std::make_unique<LeaderElector>(
        etcd.get(), LeaderElectorOptions{.election = config->etcd.prefix + "leader",
                                         .identity = self,
                                         .lease_ttl = le.lease_ttl,
                                         .renew_interval = le.renew_interval,
                                         .renew_deadline = le.renew_deadline});
    absl::StatusOr<std::unique_ptr<EtcdStore>> opened =
        EtcdStore::Open(etcd.get(), {.prefix = config->etcd.prefix,
                                     .fence = [e = elector.get()] { return e->CurrentFence(); }});
    if (!opened.ok()) {
      LogError(opened.status().message());
      return 1;
    }
    store = *std::move(opened);
  } else if (config->store == StoreKind::kMemory) {
    LogWarning("store: memory: nothing survives a restart");
    store = std::make_unique<MemoryStore>();
  } else {
    mkdir(config->state_dir.c_str(), 0700);
    absl::StatusOr<std::unique_ptr<SqliteStore>> sqlite =
        SqliteStore::Open(config->state_dir + "/controller.db");
    if (!sqlite.ok()) {
      LogError(sqlite.status().message());
      return 1;
    }
    store = *std::move(sqlite);
  }

  RealClock clock;
  ControllerMetrics metrics;
  NodeTable nodes(&clock, NodeTableOptions{.heartbeat_interval = config->heartbeat_interval,
                                           .misses = config->heartbeat_misses,
                                           .lost_after = config->lost_after,
                                           .overcommit = config->overcommit,
                                           .agent_ca_file = config->nodes_ca_file});
  scheduler::Scheduler scheduler(scheduler::SchedulerOptions{.best_of_k = config->best_of_k});
  // Kept-alive connections to the agents, for the agent client's calls and the proxy's alike:
  // a create and the first command through the proxy share one connection.
  http::ClientPool agent_connections;
  std::unique_ptr<AgentClient> agents =
      NewHttpAgentClient(config->create_timeout, &agent_connections);
  MeteredStore metered_store(store.get(), &metrics);  // moat_controller_store_request_duration
  SandboxManager sandboxes(
      &metered_store, &nodes, agents.get(), &scheduler, &metrics, &clock,
      SandboxManagerOptions{.retries = config->retries, .create_timeout = config->create_timeout});
  if (absl::Status loaded = sandboxes.Load(); !loaded.ok()) {
    LogError(absl::StrCat("loading the store: ", loaded.message()));
    return 1;
  }
  // Held high-risk commands and the audit trail (stored: a restart or failover keeps them).
  precheck::ApprovalQueue approvals(
      store.get(), &clock, config->precheck.approval_timeout, config->precheck.max_pending,
      {.max_age = config->precheck.audit_max_age,
       .max_records = static_cast<size_t>(config->precheck.audit_max_records)});
  if (absl::Status loaded = approvals.Load(); !loaded.ok()) {
    LogError(absl::StrCat("loading the held approvals from the store: ", loaded.message()));
    return 1;
  }
  // Placement, node leases and expiry run only on the leader. A follower refreshes its copy of
  // the sandboxes from the store each tick; `refreshed` is when it last could.
  std::atomic<bool> leading{elector == nullptr};
  std::atomic<int64_t> refreshed_ms{absl::ToUnixMillis(absl::Now())};
  metrics.SetLeader(leading);
  std::unique_ptr<LeaderForwarder> forwarder;
  std::thread placer;
  std::atomic<bool> stopping{false};
  if (elector) {
    elector->SetOnChange([&](bool leader) {
      // Whatever this replica knew of the nodes is stale either way: while another replica
      // led, they heartbeated there. They join again within a heartbeat (and are reconciled).
      nodes.Clear();
      if (leader) {
        // What the previous leader acknowledged, before this one acts on it.
        if (absl::Status st = sandboxes.Reload(); !st.ok()) {
          LogWarning(absl::StrCat("the new leader could not reload the store: ", st.message()));
        }
        if (absl::Status st = approvals.Load(); !st.ok()) {
          LogWarning(
              absl::StrCat("the new leader could not load the held approvals: ", st.message()));
        }
      }
      leading = leader;
      metrics.SetLeader(leader);
    });
    forwarder = std::make_unique<LeaderForwarder>(ForwarderOptions{
        .self = self,
        .leader = [e = elector.get()](const std::optional<std::string>& refused)
            -> absl::StatusOr<std::optional<std::string>> { return e->KnownLeader(refused); },
        .timeout = config->create_timeout + absl::Seconds(30),
        .ca_file = config->etcd.ca_file});
    placer = std::thread([&] {
      while (!stopping) {
        if (leading) sandboxes.RetryPending();
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    });
  } else {
    sandboxes.StartPlacer();
  }

  // Tenants, the admin API and the pre-check (docs/operations.md, "Tenants").
  HttpApiOptions api_options{&*config, api_keys, *join_token};
  TenantMetrics tenant_metrics(metrics.registry());
  TenantRegistry tenants(&metered_store, &clock);
  CreateRateLimiter create_rate(&clock);
  PrecheckGate gate(&config->precheck, &approvals, &tenant_metrics);
  std::unique_ptr<AdminApi> admin;
  if (!config->admin_key_file.empty()) {
    absl::StatusOr<std::string> admin_key = ReadTokenFile(config->admin_key_file);
    if (!admin_key.ok()) {
      LogError(absl::StrCat("the admin key (admin_key_file): ", admin_key.status().message()));
      return 1;
    }
    admin = std::make_unique<AdminApi>(*admin_key, &tenants, &approvals, &sandboxes);
    api_options.tenants = &tenants;
    api_options.create_rate = &create_rate;
    api_options.tenant_metrics = &tenant_metrics;
    api_options.admin = admin.get();
  }
  if (config->precheck.enabled) api_options.precheck = &gate;
  // POST /v1/run's language profiles and declared durations (config `languages:`).
  RunLimiter run_limits(config->languages, config->max_declared_duration, &metered_store, &clock);
  api_options.run_limits = &run_limits;
  api_options.agent_connections = &agent_connections;
  absl::StatusOr<std::unique_ptr<HttpApi>> api =
      HttpApi::Create(std::move(api_options), &nodes, &sandboxes, &metrics, &clock);
  if (!api.ok()) {
    LogError(api.status().message());
    return 1;
  }
  if (forwarder) {
    (*api)->SetFollowerGate(
        [&](const httplib::Request& req, httplib::Response& res) {
          if (leading) return false;
          if (!FollowerServes(req.method, req.path)) return true;
          // Reads from this replica's copy: say how old it is, and if etcd is out of reach.
          absl::Duration age = absl::Now() - absl::FromUnixMillis(refreshed_ms);
          res.set_header(kStaleHeader,
                         absl::StrCat(age > absl::Seconds(3) ? "store-unreachable" : "follower",
                                      "; age=", absl::ToInt64Milliseconds(age), "ms"));
          return false;
        },
        [&](const httplib::Request& req, httplib::Response& res) { forwarder->Forward(req, res); });
  }
  // A node that (re)joins is reconciled: level-triggered, whatever happened while it was away.
  (*api)->SetOnJoin([&sandboxes](const std::string& node) {
    std::thread([&sandboxes, node] {
      if (absl::Status st = sandboxes.Reconcile(node); !st.ok()) {
        LogWarning(absl::StrCat("reconciling node ", node, ": ", st.message()));
      }
    }).detach();
  });
  absl::StatusOr<int> port = (*api)->Start(config->listen_address, config->port);
  if (!port.ok()) {
    LogError(port.status().message());
    return 1;
  }
  // Tests read the bound port from here when they ask for port 0.
  std::printf("moat-controller listening on %s:%d\n", config->listen_address.c_str(), *port);
  std::fflush(stdout);
  if (elector) elector->Start();

  const timespec tick = {0, 250'000'000};
  absl::Time last_reload = absl::InfinitePast();
  bool reload_failing = false;
  while (true) {
    int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      LogInfo(absl::StrCat("received ", strsignal(sig), "; stopping"));
      break;
    }
    if (!leading) {
      // A follower: its node table is empty (agents' heartbeats go to the leader); it only
      // keeps its copy of the sandboxes fresh for the reads it serves.
      if (absl::Now() - last_reload >= absl::Seconds(1)) {
        last_reload = absl::Now();
        absl::Status reloaded = sandboxes.Reload();
        const bool was_failing = reload_failing;
        reload_failing = !reloaded.ok();
        if (reloaded.ok()) {
          refreshed_ms = absl::ToUnixMillis(absl::Now());
        } else if (!was_failing) {
          LogWarning(
              absl::StrCat("follower: cannot refresh the sandboxes from etcd (reads are "
                           "marked stale): ",
                           reloaded.message()));
        }
      }
      continue;
    }
    refreshed_ms = absl::ToUnixMillis(absl::Now());
    for (const std::string& lost : nodes.Tick()) {
      LogWarning(absl::StrCat("node ", lost, " lost: no heartbeat for ",
                              absl::FormatDuration(config->lost_after)));
      sandboxes.NodeLost(lost);
    }
    sandboxes.Tick();
    approvals.Tick();
    tenant_metrics.SetUsage(sandboxes.UsageByTenant());
    tenant_metrics.SetApprovals(approvals.Counts());
  }
  if (elector) elector->Stop();  // Resigns: another replica leads at once.
  (*api)->Stop();
  stopping = true;
  if (placer.joinable()) placer.join();
  sandboxes.StopPlacer();
  LogInfo("stopped");
  return 0;
}

}  // namespace
}  // namespace moat::controller

int main(int argc, char** argv) { return moat::controller::Run(argc, argv); }
