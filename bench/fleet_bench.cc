// The controller end to end on loopback, SDK-shaped (docs/performance.md, "Controller"): a
// create (a warm pool hit) plus the first /bin/true through the controller's proxy, next to the
// same work straight on the agent, so the controller's own cost shows; a create with an
// entrypoint on the agent, in one call and in the four the controller made before; the
// controller's agent client on a new connection per call and on kept-alive ones; creates per
// second through the controller with 2 clients; and the SQLite store's commits per second.
//
// Against a running fleet (scripts/fleet.sh --keep prints the values):
//   fleet_bench --controller http://127.0.0.1:8080 --key KEY --agent http://127.0.0.1:7070
//               --agent-token-file DIR/agent.token [--rounds 50] [--store-dir /var/tmp]
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/latency_stats.h"
#include "controller/agent_client.h"
#include "controller/store/sqlite_store.h"
#include "nlohmann/json.hpp"
#include "util/http/client_pool.h"
#include "util/shell_command.h"

namespace {

using nlohmann::json;

struct Flags {
  std::string controller, key, agent, agent_token, store_dir = "/var/tmp";
  int rounds = 50;
};

std::unique_ptr<httplib::Client> Client(const std::string& url) {
  auto c = std::make_unique<httplib::Client>(url);
  c->set_keep_alive(true);  // As the SDK's fetch: one connection, reused.
  c->set_tcp_nodelay(true);
  c->set_read_timeout(60, 0);
  return c;
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

void Print(const char* what, std::vector<absl::Duration> samples) {
  std::sort(samples.begin(), samples.end());
  if (samples.empty()) {
    std::printf("%-46s no samples\n", what);
    return;
  }
  std::printf("%-46s n=%zu p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", what, samples.size(),
              Ms(moat::bench::NearestRankPercentile(samples, 50)),
              Ms(moat::bench::NearestRankPercentile(samples, 99)), Ms(samples.back()));
}

// moat_controller_create_to_ready_seconds_count{start="warm"} now.
double WarmCreates(httplib::Client& c) {
  auto res = c.Get("/metrics");
  if (!res) return -1;
  const std::string key = "moat_controller_create_to_ready_seconds_count{start=\"warm\"} ";
  size_t at = res->body.find(key);
  double n = 0;
  if (at == std::string::npos) return 0;
  std::string rest = res->body.substr(at + key.size());
  (void)absl::SimpleAtod(rest.substr(0, rest.find('\n')), &n);
  return n;
}

// Waits (untimed) until the agent's pool holds a ready sandbox again, as its metrics say.
void WaitForWarm(httplib::Client& agent, const httplib::Headers& auth) {
  for (int i = 0; i < 200; ++i) {
    auto res = agent.Get("/metrics", auth);
    if (res && res->body.find("moat_pool_depth{profile=\"default\"} 0") == std::string::npos &&
        res->body.find("moat_pool_depth{profile=\"default\"}") != std::string::npos) {
      return;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

bool RunTrue(httplib::Client& c, const std::string& path, const std::string& token) {
  auto res = c.Post(path, {{"X-EXECD-ACCESS-TOKEN", token}}, R"({"command": "/bin/true"})",
                    "application/json");
  return res && res->status == 200 && res->body.find("execution_complete") != std::string::npos;
}

int ThroughController(const Flags& f) {
  auto c = Client(f.controller);
  auto agent = Client(f.agent);
  const httplib::Headers key = {{"OPEN-SANDBOX-API-KEY", f.key}};
  const httplib::Headers agent_auth = {{"Authorization", "Bearer " + f.agent_token}};
  const std::string create =
      R"({"image": {"uri": "debian:12"}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 600,
          "resourceLimits": {"cpu": "1", "memory": "512Mi"}})";
  std::vector<absl::Duration> create_ms, first_true, total;
  double warm_before = WarmCreates(*c);
  for (int i = 0; i < f.rounds; ++i) {
    WaitForWarm(*agent, agent_auth);
    absl::Time t0 = absl::Now();
    auto res = c->Post("/v1/sandboxes", key, create, "application/json");
    absl::Time t1 = absl::Now();
    if (!res || res->status != 202) {
      std::fprintf(stderr, "create failed: %s\n", res ? res->body.c_str() : "no answer");
      return 1;
    }
    std::string id = json::parse(res->body)["id"];
    auto ep = c->Get(absl::StrCat("/v1/sandboxes/", id, "/endpoints/44772"), key);
    json endpoint = json::parse(ep->body);
    std::string url = endpoint["endpoint"];
    std::string token = endpoint["headers"]["X-EXECD-ACCESS-TOKEN"];
    absl::Time t2 = absl::Now();
    if (!RunTrue(*c, url.substr(url.find('/')) + "/command", token)) {
      std::fprintf(stderr, "/bin/true through the proxy failed\n");
      return 1;
    }
    absl::Time t3 = absl::Now();
    create_ms.push_back(t1 - t0);
    first_true.push_back(t3 - t2);
    total.push_back((t1 - t0) + (t3 - t2));
    c->Delete(absl::StrCat("/v1/sandboxes/", id), key);
  }
  double warm = WarmCreates(*c) - warm_before;
  std::printf("through moat-controller (%d rounds, %.0f warm pool hits):\n", f.rounds, warm);
  Print("  POST /v1/sandboxes (answers Running)", create_ms);
  Print("  first /bin/true through the proxy", first_true);
  Print("  create + first /bin/true", total);

  create_ms.clear(), first_true.clear(), total.clear();
  for (int i = 0; i < f.rounds; ++i) {
    WaitForWarm(*agent, agent_auth);
    absl::Time t0 = absl::Now();
    auto res = agent->Post("/v1/sandboxes", agent_auth,
                           R"({"profile": "default", "ttl_seconds": 600})", "application/json");
    absl::Time t1 = absl::Now();
    if (!res || res->status != 201) {
      std::fprintf(stderr, "agent create failed: %s\n", res ? res->body.c_str() : "no answer");
      return 1;
    }
    json sb = json::parse(res->body);
    std::string id = sb["id"];
    absl::Time t2 = absl::Now();
    if (!RunTrue(*agent, absl::StrCat("/v1/sandboxes/", id, "/execd/command"), sb["token"])) {
      std::fprintf(stderr, "/bin/true on the agent failed\n");
      return 1;
    }
    absl::Time t3 = absl::Now();
    create_ms.push_back(t1 - t0);
    first_true.push_back(t3 - t2);
    total.push_back((t1 - t0) + (t3 - t2));
    agent->Delete(absl::StrCat("/v1/sandboxes/", id), agent_auth);
  }
  std::printf("straight on moat-agent (%d rounds):\n", f.rounds);
  Print("  POST /v1/sandboxes", create_ms);
  Print("  first /bin/true", first_true);
  Print("  create + first /bin/true", total);
  return 0;
}

// A create with an entrypoint straight on the agent, both ways in interleaved rounds: as the
// controller did it before the node API took "entrypoint" (the create, then the check through
// execd to its end, its status, and the start: 4 calls) and in the create itself (1 call).
int EntrypointOnTheAgent(const Flags& f) {
  auto agent = Client(f.agent);
  const httplib::Headers auth = {{"Authorization", "Bearer " + f.agent_token}};
  const std::vector<std::string> entrypoint = {"tail", "-f", "/dev/null"};
  std::vector<absl::Duration> four_calls, one_call;
  for (int i = 0; i < 2 * f.rounds; ++i) {
    const bool in_create = i % 2 == 1;
    WaitForWarm(*agent, auth);
    json create = {{"profile", "default"}, {"ttl_seconds", 600}};
    if (in_create) create["entrypoint"] = entrypoint;
    absl::Time t0 = absl::Now();
    auto res = agent->Post("/v1/sandboxes", auth, create.dump(), "application/json");
    if (!res || res->status != 201) {
      std::fprintf(stderr, "agent create failed: %s\n", res ? res->body.c_str() : "no answer");
      return 1;
    }
    json sb = json::parse(res->body);
    const std::string id = sb["id"], base = absl::StrCat("/v1/sandboxes/", id, "/execd/command");
    const httplib::Headers token = {{"X-EXECD-ACCESS-TOKEN", sb["token"].get<std::string>()}};
    bool ok = in_create ? sb.contains("entrypoint_command") : true;
    if (!in_create) {
      json check = {{"command", moat::EntrypointCheckCommand(entrypoint[0])}, {"timeout", 10000}};
      auto checked = agent->Post(base, token, check.dump(), "application/json");
      ok = checked && checked->status == 200;
      std::string command_id;
      for (absl::string_view line : absl::StrSplit(ok ? checked->body : "", '\n')) {
        json e = json::parse(absl::StripPrefix(line, "data:"), nullptr, false);
        if (e.is_object() && e.value("type", "") == "init") command_id = e.value("text", "");
      }
      auto state = agent->Get(absl::StrCat(base, "/status/", command_id), token);
      json start = {{"command", moat::ExecCommand(entrypoint)}, {"background", true}};
      auto started = agent->Post(base, token, start.dump(), "application/json");
      ok = ok && state && state->status == 200 && started && started->status == 200;
    }
    absl::Time t1 = absl::Now();
    if (!ok) {
      std::fprintf(stderr, "starting the entrypoint on the agent failed\n");
      return 1;
    }
    (in_create ? one_call : four_calls).push_back(t1 - t0);
    agent->Delete(absl::StrCat("/v1/sandboxes/", id), auth);
  }
  std::printf("create with an entrypoint straight on moat-agent (%d interleaved rounds each):\n",
              f.rounds);
  Print("  create, check, its status, start (4 calls)", four_calls);
  Print("  create with \"entrypoint\" (1 call)", one_call);
  return 0;
}

// The controller's own calls to the agent (its agent client: a create with an entrypoint, then
// /bin/true through execd, then the delete) in interleaved rounds: on a new TCP connection per
// call, as before util/http/client_pool.h, and on the pool's kept-alive connection.
int ConnectionsToTheAgent(const Flags& f) {
  auto agent = Client(f.agent);
  const httplib::Headers auth = {{"Authorization", "Bearer " + f.agent_token}};
  const moat::controller::AgentEndpoint endpoint{f.agent, f.agent_token, ""};
  moat::http::ClientPool kept, none({.max_idle_per_peer = 0});
  auto kept_client = moat::controller::NewHttpAgentClient(absl::Seconds(60), &kept);
  auto fresh_client = moat::controller::NewHttpAgentClient(absl::Seconds(60), &none);
  moat::controller::AgentCreate create;
  create.profile = "default";
  create.ttl = absl::Minutes(10);
  create.entrypoint = {"tail", "-f", "/dev/null"};
  moat::controller::AgentCommand true_command;
  true_command.command = "/bin/true";
  std::vector<absl::Duration> fresh_create, fresh_total, kept_create, kept_total;
  for (int i = 0; i < 2 * f.rounds; ++i) {
    const bool reuse = i % 2 == 1;
    moat::controller::AgentClient& client = reuse ? *kept_client : *fresh_client;
    WaitForWarm(*agent, auth);
    absl::Time t0 = absl::Now();
    auto created = client.Create(endpoint, create);
    absl::Time t1 = absl::Now();
    if (!created.ok()) {
      std::fprintf(stderr, "agent create failed: %s\n", created.status().ToString().c_str());
      return 1;
    }
    auto ran = client.RunCommand(endpoint, created->id, created->token, true_command);
    absl::Time t2 = absl::Now();
    if (!ran.ok() || ran->exit_code != 0) {
      std::fprintf(stderr, "/bin/true on the agent failed\n");
      return 1;
    }
    (reuse ? kept_create : fresh_create).push_back(t1 - t0);
    (reuse ? kept_total : fresh_total).push_back(t2 - t0);
    (void)client.Delete(endpoint, created->id);
  }
  std::printf("the controller's agent client on moat-agent (%d interleaved rounds each):\n",
              f.rounds);
  Print("  create, a new connection per call", fresh_create);
  Print("  create, a kept-alive connection", kept_create);
  Print("  create + /bin/true, a new connection per call", fresh_total);
  Print("  create + /bin/true, a kept-alive connection", kept_total);
  return 0;
}

// Two clients creating (and deleting) as fast as the fleet answers.
int CreatesPerSecond(const Flags& f) {
  auto probe = Client(f.controller);
  double warm_before = WarmCreates(*probe);
  const int per_client = f.rounds / 2 > 0 ? f.rounds / 2 : 1;
  std::atomic<int> failed{0};
  absl::Time start = absl::Now();
  std::vector<std::thread> clients;
  for (int t = 0; t < 2; ++t) {
    clients.emplace_back([&] {
      auto c = Client(f.controller);
      const httplib::Headers key = {{"OPEN-SANDBOX-API-KEY", f.key}};
      for (int i = 0; i < per_client; ++i) {
        auto res =
            c->Post("/v1/sandboxes", key,
                    R"({"image": {"uri": "debian:12"}, "entrypoint": ["tail", "-f", "/dev/null"],
                               "resourceLimits": {"cpu": "1", "memory": "512Mi"}})",
                    "application/json");
        if (!res || res->status != 202) {
          ++failed;
          continue;
        }
        c->Delete(absl::StrCat("/v1/sandboxes/", json::parse(res->body)["id"].get<std::string>()),
                  key);
      }
    });
  }
  for (auto& t : clients) t.join();
  absl::Duration took = absl::Now() - start;
  int done = 2 * per_client - failed;
  std::printf(
      "2 clients, create + delete through the controller: %d creates in %.2f s = %.1f creates/s "
      "(%.0f warm pool hits, %d failed)\n",
      done, absl::ToDoubleSeconds(took), done / absl::ToDoubleSeconds(took),
      WarmCreates(*probe) - warm_before, failed.load());
  return failed == 0 ? 0 : 1;
}

// The store alone: one sandbox-sized record per commit, as the create path writes it.
int StoreCommits(const Flags& f) {
  std::string dir = absl::StrCat(f.store_dir, "/moat-fleet-bench-", getpid());
  std::filesystem::create_directories(dir);
  auto store = moat::controller::SqliteStore::Open(dir + "/bench.db");
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  const std::string record(600, 'x');
  const int n = 5000;
  absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) {
    if (!(*store)
             ->Commit(moat::controller::WriteBatch().Put(absl::StrCat("sandboxes/", i), record))
             .ok()) {
      return 1;
    }
  }
  absl::Duration took = absl::Now() - start;
  std::printf(
      "SQLite store (WAL, synchronous=NORMAL), one 600-byte put per commit: %.0f commits/s\n",
      n / absl::ToDoubleSeconds(took));
  store->reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  std::string token_file;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--controller")
      f.controller = v;
    else if (k == "--key")
      f.key = v;
    else if (k == "--agent")
      f.agent = v;
    else if (k == "--agent-token-file")
      token_file = v;
    else if (k == "--rounds")
      f.rounds = std::atoi(v.c_str());
    else if (k == "--store-dir")
      f.store_dir = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    std::getline(in, f.agent_token);
  }
  int status = StoreCommits(f);
  if (f.controller.empty() || f.agent.empty() || f.agent_token.empty()) {
    std::fprintf(stderr,
                 "no fleet given (--controller, --key, --agent, --agent-token-file): the store "
                 "only\n");
    return status;
  }
  status |= ThroughController(f);
  status |= EntrypointOnTheAgent(f);
  status |= ConnectionsToTheAgent(f);
  status |= CreatesPerSecond(f);
  return status;
}
