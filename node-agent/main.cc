// moat-agent: the node daemon. main only wires the parts together and waits for a signal; each
// part lives in its own file (see node-agent/CMakeLists.txt).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "node-agent/api/execd_api.h"
#include "node-agent/api/http_api.h"
#include "node-agent/backend/fake_backend.h"
#include "node-agent/backend/kernel_backend.h"
#include "node-agent/config/config.h"
#include "node-agent/controller_link.h"
#include "node-agent/metrics.h"
#include "node-agent/pool/registry.h"
#include "node-agent/pool/sandbox_store.h"
#include "node-agent/probe/probe_launcher.h"
#include "node-agent/probe/probe_monitor.h"
#include "node-agent/service.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/token.h"

namespace moat::agent {
namespace {

constexpr char kUsage[] =
    "usage: moat-agent --config FILE [--fake-backend]\n"
    "  --config FILE    the agent's YAML configuration (see node-agent/config.h)\n"
    "  --fake-backend   serve the API with an in-memory backend that runs nothing (for API\n"
    "                   development and tests of clients)\n";

absl::StatusOr<std::unique_ptr<ControllerLink>> MakeControllerLink(const AgentConfig& config,
                                                                   const std::string& node_token,
                                                                   int port,
                                                                   SandboxBackend* backend,
                                                                   SandboxService* service) {
  const ControllerJoinConfig& c = *config.controller;
  absl::StatusOr<std::string> join_token = ReadTokenFile(c.join_token_file);
  if (!join_token.ok()) {
    return absl::Status(join_token.status().code(), absl::StrCat("controller.join_token_file: ",
                                                                 join_token.status().message()));
  }
  std::string name = c.node_name;
  if (name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    name = host;
  }
  NodeFacts base;
  base.agent_url = !c.advertise_url.empty() ? c.advertise_url
                                            : absl::StrCat(config.tls ? "https://" : "http://",
                                                           config.listen_address, ":", port);
  base.agent_token = node_token;
  base.version = MOAT_VERSION;
  base.labels = c.labels;
  base.taints = c.taints;
  for (const ProfileConfig& p : config.profiles) {
    base.profiles.push_back(p.name);
    base.profile_limits[p.name] = p.limits;
  }
  auto report = [base, backend, service] {
    NodeFacts f = base;
    NodeUsage usage = backend->Usage();
    // The fake backend reports no capacity; the machine's own keeps a fake fleet schedulable.
    if (usage.cpu_cores == 0) usage.cpu_cores = static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
    if (usage.memory_bytes == 0) {
      usage.memory_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                           static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    }
    f.cpu = usage.cpu_cores;
    f.cpu_allocated = usage.cpu_cores_allocated;
    f.memory = usage.memory_bytes;
    f.memory_used = usage.memory_bytes_used;
    f.pids = usage.pids_max;
    f.pids_used = usage.pids_used;
    for (const std::string& p : f.profiles) f.warm[p] = service->pool().Stats(p).depth;
    return NodeReportJson(f);
  };
  return std::make_unique<ControllerLink>(
      ControllerLinkOptions{.controller_url = c.url,
                            .join_token = *join_token,
                            .node_name = name,
                            .interval = config.heartbeat_interval,
                            .ca_file = c.ca_file},
      report);
}

// Deletes every sandbox the agent still serves (a stop without a restart grace), each cleaned
// and checked as a client's delete is: the service logs what one leaves behind, and the next
// start's crash cleanup looks for it again.
void EndSandboxesAtStop(SandboxService& service) {
  int ended = 0, failed = 0;
  for (const SandboxRecord& record : service.List()) {
    absl::StatusOr<CleanupReport> report = service.Delete(record.id);
    ++(report.ok() && report->clean() ? ended : failed);
  }
  if (ended + failed == 0) return;
  LogInfo(absl::StrCat("stopping: ended ", ended, " sandbox", ended == 1 ? "" : "es",
                       failed > 0 ? absl::StrCat(", ", failed, " not cleaned (above)") : "",
                       " (no restart_grace: nothing outlives this agent)"));
}

int Run(int argc, char** argv) {
  // Debian's abseil has absl::Mutex's deadlock detection on (a debugging aid, off in upstream's
  // NDEBUG builds): every lock records its order in one global graph under a global lock. In the
  // 2-client /bin/true loop that was ~8% of the agent's CPU (docs/performance.md). Off before
  // any mutex is used; the tests, which do not run this, keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Block the stop signals in every thread (threads made later, the HTTP pool's and
  // the backend's, inherit this mask), so that only the
  // sigtimedwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // A client that hangs up must not kill the agent.

  std::string config_path;
  bool fake_backend = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg == "--fake-backend") {
      fake_backend = true;
    } else if (arg == "--version") {
      std::printf("moat-agent %s\n", MOAT_VERSION);
      return 0;
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (config_path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  absl::StatusOr<AgentConfig> config = LoadConfig(config_path);
  if (!config.ok()) {
    LogError(config.status().message());
    return 1;
  }
  if (absl::Status loaded = LoadProfilePolicies(&*config); !loaded.ok()) {
    LogError(loaded.message());
    return 1;
  }
  absl::StatusOr<std::string> token = ReadTokenFile(config->token_file);
  if (!token.ok()) {
    LogError(token.status().message());
    return 1;
  }
  RealClock clock;
  // The probes report to the monitor, whose callbacks go to the service, made further down (it
  // needs the backend, which needs the monitor): they reach it through this pointer.
  std::atomic<SandboxService*> service_for_probes{nullptr};
  auto with_service = [&service_for_probes](auto&& f) {
    if (SandboxService* s = service_for_probes.load()) f(*s);
  };
  ProbeCallbacks probe_callbacks;
  probe_callbacks.on_event = [&](const std::string& id, const ProbeEvent& e) {
    with_service([&](SandboxService& s) {
      switch (e.type) {
        case ProbeEvent::Type::kViolation:
          s.ReportViolation(id, e.kind, e.detail);
          break;
        case ProbeEvent::Type::kNearLimit:
          s.ReportLimit(id, "near_limit", e.kind, absl::StrCat(e.value, " of ", e.limit));
          break;
        case ProbeEvent::Type::kKilled:
          s.ReportLimit(id, "killed", e.kind, absl::StrCat(e.value, " over ", e.limit));
          break;
        case ProbeEvent::Type::kExited:
          s.ReportExited(id, "its init exited");
          break;
        case ProbeEvent::Type::kDropped:
          LogWarning(absl::StrCat("sandbox ", id, ": its probe dropped ", e.lines, " lines"));
          break;
        case ProbeEvent::Type::kError:
          LogWarning(absl::StrCat("sandbox ", id, ": probe error: ", e.detail));
          break;
      }
    });
  };
  probe_callbacks.on_compromised = [&](const std::string& id, const std::string& reason) {
    with_service([&](SandboxService& s) { s.ReportCompromised(id, reason); });
  };
  probe_callbacks.on_heartbeat_missed = [&](const std::string& id) {
    with_service([&](SandboxService& s) { s.ReportHeartbeatMissed(id); });
  };
  absl::StatusOr<std::unique_ptr<ProbeMonitor>> monitor =
      ProbeMonitor::Create(ProbeMonitorOptions{.interval = config->heartbeat_interval,
                                               .misses = config->heartbeat_misses},
                           std::move(probe_callbacks), &clock);
  if (!monitor.ok()) {
    LogError(monitor.status().message());
    return 1;
  }
  ProbeLauncher probes(ProbeLauncher::DefaultBinary(), config->heartbeat_interval, monitor->get());

  std::unique_ptr<SandboxBackend> backend;
  if (fake_backend) {
    LogWarning("using the in-memory fake backend: sandboxes are bookkeeping only");
    backend = std::make_unique<FakeBackend>();
  } else {
    KernelBackendOptions options;
    options.state_dir = config->state_dir;
    options.private_paths = AgentOwnFiles(*config, config_path);
    options.on_start = [&probes](const std::string& id, sandbox::LiveSandbox& box,
                                 const sandbox::Limits& limits) {
      return probes.Start(id, box, limits);
    };
    options.on_destroy = [&probes](const std::string& id) { probes.Stop(id); };
    options.restart_grace = config->restart_grace;
    options.probe_pid = [&probes](const std::string& id) { return probes.ProbePid(id); };
    options.on_egress = [&](const std::string& id, bool allowed, const std::string& detail) {
      with_service([&](SandboxService& s) { s.ReportEgress(id, allowed, detail); });
    };
    options.settle_probe = [m = monitor->get()](const std::string& id, absl::Duration timeout) {
      m->Settle(id, timeout);
    };
    options.last_heartbeat = [m = monitor->get()](const std::string& id) {
      absl::StatusOr<ProbeHeartbeat> beat = m->LastHeartbeat(id);
      return beat.ok() ? beat->received : absl::InfinitePast();
    };
    absl::StatusOr<std::unique_ptr<KernelBackend>> kernel = KernelBackend::Create(options);
    if (!kernel.ok()) {
      LogError(absl::StrCat("cannot make sandboxes on this node: ", kernel.status().message()));
      return 1;
    }
    backend = *std::move(kernel);
  }

  Registry registry(&clock);
  std::vector<std::string> profiles;
  for (const ProfileConfig& p : config->profiles) profiles.push_back(p.name);
  AgentMetrics metrics(profiles);
  SandboxService service(&*config, backend.get(), &registry, &metrics, &clock);
  service_for_probes = &service;
  // Sandboxes outlive the agent only with the kernel backend and a restart grace.
  const bool keep_sandboxes = !fake_backend && config->restart_grace > absl::ZeroDuration();
  std::optional<SandboxStore> store;
  if (!fake_backend) {
    absl::StatusOr<SandboxStore> opened =
        SandboxStore::Open(absl::StrCat(config->state_dir, "/entries"));
    if (!opened.ok()) {
      LogError(opened.status().message());
      return 1;
    }
    store = *std::move(opened);
    if (keep_sandboxes) {
      service.SetStore(&*store);
    } else {
      for (const std::string& id : store->Ids()) store->Remove(id);  // nothing is re-adopted
    }
  }
  // Before the leftovers are cleaned: what the previous agent left running is taken over.
  std::vector<AdoptedSandboxInfo> adopted = service.Readopt();
  if (absl::StatusOr<CleanupReport> left = service.CleanLeftovers(); !left.ok()) {
    LogError(absl::StrCat("cleaning what a previous agent left failed: ", left.status().message()));
    return 1;
  }
  // After the leftovers are gone, so a warm sandbox is never mistaken for one of them.
  service.StartPool();
  // Before the server, which calls it: it must outlive the server.
  ExecdApi execd(backend.get(), &registry, &metrics, &clock, ExecdOptions{});
  service.SetOnRecycled([&execd](const std::string& id) { execd.ForgetSandbox(id); });
  // A command's result lists its sandbox's violations (POST /v1/run's, as `moat run`'s).
  service.SetOnViolation(
      [&execd](const std::string& id, const std::string& kind, const std::string& detail) {
        execd.AddViolation(id, kind, detail);
      });
  execd.Readopt(adopted);
  HttpApiOptions api_options{*token, config->max_request_bytes, config->tls};
  api_options.execd = &execd;
  absl::StatusOr<std::unique_ptr<HttpApi>> api = HttpApi::Create(&service, api_options);
  if (!api.ok()) {
    LogError(api.status().message());
    return 1;
  }
  absl::StatusOr<int> port = (*api)->Start(config->listen_address, config->port);
  if (!port.ok()) {
    LogError(port.status().message());
    return 1;
  }

  // Joining a controller, if the config names one (controller_link.h).
  std::unique_ptr<ControllerLink> link;
  if (config->controller.has_value()) {
    absl::StatusOr<std::unique_ptr<ControllerLink>> made =
        MakeControllerLink(*config, *token, *port, backend.get(), &service);
    if (!made.ok()) {
      LogError(made.status().message());
      return 1;
    }
    link = *std::move(made);
    link->Start();
  }

  // The main thread waits for a stop signal and, once a second, recycles expired sandboxes.
  const timespec tick = {1, 0};
  while (true) {
    int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      LogInfo(absl::StrCat("received ", strsignal(sig), "; stopping"));
      break;
    }
    service.DeleteExpired();
  }
  if (link) {
    // A restart that keeps the sandboxes: the controller waits for the next agent that long.
    if (keep_sandboxes) {
      link->Leave(config->restart_grace);
    } else {
      link->Stop();
    }
  }
  execd.StopStreams();
  (*api)->Stop();  // Finishes requests in flight.
  // Warm sandboxes first, while the backend is still here. Without a grace a sandbox's init
  // exits with the agent anyway (its socket closes), so a stop or restart ends every sandbox of
  // the node (the controller reschedules): each is deleted here as a client's delete would be,
  // so that what it leaves behind is found and said.
  service.StopPool();
  service.WaitRecycled(absl::Seconds(30));
  if (keep_sandboxes) {
    // The sandboxes go on; the next agent re-adopts them within the grace (docs/agent.md).
    probes.ReleaseAll();
    backend->Release();
    LogInfo(absl::StrCat("left the sandboxes running for the next agent (restart_grace ",
                         absl::FormatDuration(config->restart_grace), ")"));
  } else {
    EndSandboxesAtStop(service);
    if (store.has_value()) {
      // Nothing outlives this agent: no record may make the next one look for it.
      for (const SandboxRecord& r : registry.List()) store->Remove(r.id);
    }
  }
  // The backend outlives the service (declared before it) and ends the remaining sandboxes when
  // it goes; their probes' last reports must not reach a service that is gone.
  service_for_probes = nullptr;
  LogInfo("stopped");
  return 0;
}

}  // namespace
}  // namespace moat::agent

int main(int argc, char** argv) { return moat::agent::Run(argc, argv); }
