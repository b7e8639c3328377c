#include "e2e/controller/fleet.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "controller/testing/etcd_cluster.h"
#include "e2e/time_scale.h"

namespace moat::e2e {
namespace {

std::string Env(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string RandomHex() {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  unsigned char bytes[16];
  urandom.read(reinterpret_cast<char*>(bytes), sizeof(bytes));
  std::string out;
  for (unsigned char b : bytes) absl::StrAppend(&out, absl::Hex(b, absl::kZeroPad2));
  return out;
}

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

// The controller's node timing: a heartbeat each second, as the agents send them, and a node
// lost after 6 s without one. Scaled (e2e/time_scale.h): under emulation a busy agent's
// heartbeat can be seconds late, and a node taken for lost ends its sandboxes when it is back
// (the controller deletes what it marked Failed): a run streaming its output was cut so.
std::string NodeTiming() {
  return absl::StrCat("heartbeat_interval: 1s, misses: ", Rounds(3),
                      ", lost_after: ", static_cast<int>(Scaled(6)), "s");
}

// A port nothing listens on now (the daemon binds it right after; a clash fails its start).
using controller::testing::FreePort;

std::pair<int, nlohmann::json> Send(httplib::Client& client, const std::string& method,
                                    const std::string& path, const std::string& body,
                                    const httplib::Headers& headers) {
  httplib::Result res = method == "GET"      ? client.Get(path, headers)
                        : method == "DELETE" ? client.Delete(path, headers)
                        : method == "PATCH"  ? client.Patch(path, headers, body, "application/json")
                        : method == "PUT"    ? client.Put(path, headers, body, "application/json")
                                             : client.Post(path, headers, body, "application/json");
  if (!res) return {0, nullptr};
  return {res->status, nlohmann::json::parse(res->body, nullptr, false)};
}

}  // namespace

absl::Status Daemon::Spawn(const std::string& binary, std::vector<std::string> args,
                           const std::string& log_path) {
  log_path_ = log_path;
  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    // Dies with the test, even a test that crashed.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(log, 1);
    dup2(log, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return absl::OkStatus();
}

Daemon::~Daemon() {
  if (pid_ > 0) Kill(SIGTERM);
}

void Daemon::Kill(int signal) {
  if (pid_ <= 0) return;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string Daemon::Log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::StatusOr<std::unique_ptr<Fleet>> Fleet::Create() {
  signal(SIGPIPE, SIG_IGN);  // A daemon that closes early (413) must not kill the test.
  std::unique_ptr<Fleet> f(new Fleet);
  char tmpl[] = "/var/tmp/moat-e2e-fleet-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  f->dir_ = tmpl;
  f->api_key_ = RandomHex();
  f->join_token_file_ = f->dir_ + "/join.token";
  f->keys_file_ = f->dir_ + "/controller.keys";
  WriteFile(f->join_token_file_, RandomHex() + "\n", 0600);
  WriteFile(f->keys_file_, "e2e " + f->api_key_ + "\n", 0600);
  f->admin_key_ = RandomHex();
  WriteFile(f->dir_ + "/admin.key", f->admin_key_ + "\n", 0600);
  return f;
}

Fleet::~Fleet() {
  agents_.clear();  // Agents first: they destroy their sandboxes.
  controller_.reset();
  replicas_.clear();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string Fleet::MoatBinary() {
  std::string agent = MOAT_E2E_AGENT_BIN;
  return Env("MOAT_BIN", (agent.substr(0, agent.rfind('/') + 1) + "moat").c_str());
}

absl::Status Fleet::StartController() {
  if (controller_port_ == 0) controller_port_ = FreePort();
  std::string config = dir_ + "/controller.yaml";
  WriteFile(
      config,
      absl::StrCat(
          "listen: {address: 127.0.0.1, port: ", controller_port_, "}\n", "state_dir: ", dir_,
          "/controller-state\n", "api_keys_file: ", keys_file_, "\n", "join_token_file: ",
          join_token_file_, "\n", "images: [{image: \"*\", profile: default}]\n", "nodes: {",
          NodeTiming(), tls_ ? absl::StrCat(", tls: {ca: ", nodes_ca_, "}") : "", "}\n",
          tls_ ? absl::StrCat("tls: {cert: ", tls_->server_pem, ", key: ", tls_->server_key, "}\n")
               : "",
          "api: {create_timeout: 5s}\n", "admin_key_file: ", dir_, "/admin.key\n", extra_config_),
      0600);
  controller_ = std::make_unique<Daemon>();
  controller_->port_ = controller_port_;
  if (absl::Status st = controller_->Spawn(Env("MOAT_CONTROLLER_BIN", MOAT_E2E_CONTROLLER_BIN),
                                           {"--config", config}, dir_ + "/controller.log");
      !st.ok()) {
    return st;
  }
  std::unique_ptr<httplib::Client> client = ClientOf(controller_port_);
  if (!WaitFor(
          [&] {
            auto r = client->Get("/health");
            return r && r->status == 200;
          },
          absl::Seconds(10))) {
    return absl::UnavailableError("the controller did not answer /health: " + controller_->Log());
  }
  return absl::OkStatus();
}

std::unique_ptr<httplib::Client> Fleet::ClientOf(int port, bool controller) const {
  // A controller serving TLS from extra config (`tls:`) is asked over TLS, unverified: the test
  // checks the certificate itself.
  const bool tls = tls_.has_value() || (controller && absl::StrContains(extra_config_, "tls:"));
  auto client = std::make_unique<httplib::Client>(
      absl::StrCat(tls ? "https" : "http", "://127.0.0.1:", port));
  if (tls_) {
    client->set_ca_cert_path(tls_->ca_pem.c_str());
  } else if (tls) {
    client->enable_server_certificate_verification(false);
  }
  client->set_read_timeout(60, 0);
  return client;
}

absl::Status Fleet::StartReplica(int i, const std::vector<std::string>& etcd_endpoints) {
  if (!replica_ports_.contains(i)) replica_ports_[i] = FreePort();
  if (controller_port_ == 0) controller_port_ = replica_ports_[i];
  const int port = replica_ports_[i];
  std::string endpoints;
  for (const std::string& e : etcd_endpoints) {
    absl::StrAppend(&endpoints, endpoints.empty() ? "" : ", ", e);
  }
  std::string config = absl::StrCat(dir_, "/controller-", i, ".yaml");
  WriteFile(config,
            absl::StrCat("listen: {address: 127.0.0.1, port: ", port, "}\n", "state_dir: ", dir_,
                         "/controller-state-", i, "\n", "api_keys_file: ", keys_file_, "\n",
                         "join_token_file: ", join_token_file_, "\n",
                         "store: {kind: etcd, endpoints: [", endpoints, "]}\n",
                         "leader_election: {lease_ttl: 6s, renew_deadline: 4s, "
                         "renew_interval: 1s}\n",
                         "images: [{image: \"*\", profile: default}]\n", "nodes: {", NodeTiming(),
                         "}\n", "api: {create_timeout: 5s}\n", "admin_key_file: ", dir_,
                         "/admin.key\n", extra_config_),
            0600);
  auto d = std::make_unique<Daemon>();
  d->port_ = port;
  if (absl::Status st =
          d->Spawn(Env("MOAT_CONTROLLER_BIN", MOAT_E2E_CONTROLLER_BIN), {"--config", config},
                   absl::StrCat(dir_, "/controller-", i, ".log"));
      !st.ok()) {
    return st;
  }
  replicas_[i] = std::move(d);
  httplib::Client client("127.0.0.1", port);
  if (!WaitFor(
          [&] {
            auto r = client.Get("/health");
            return r && r->status == 200;
          },
          absl::Seconds(10))) {
    return absl::UnavailableError("replica did not answer /health: " + replicas_[i]->Log());
  }
  return absl::OkStatus();
}

std::pair<int, nlohmann::json> Fleet::CallReplica(int i, const std::string& method,
                                                  const std::string& path, const std::string& body,
                                                  std::map<std::string, std::string>* headers) {
  httplib::Client client("127.0.0.1", replica_ports_.at(i));
  client.set_read_timeout(60, 0);
  httplib::Headers h = {{"OPEN-SANDBOX-API-KEY", api_key_}};
  if (headers == nullptr) return Send(client, method, path, body, h);
  httplib::Result r = method == "GET" ? client.Get(path.c_str(), h)
                                      : client.Post(path.c_str(), h, body, "application/json");
  if (!r) return {0, nullptr};
  for (const auto& [k, v] : r->headers) (*headers)[k] = v;
  return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
}

absl::Status Fleet::StartAgent(const AgentOptions& o) {
  std::string adir = absl::StrCat(dir_, "/agent-", o.name);
  std::filesystem::create_directories(adir + "/state");
  chmod((adir + "/state").c_str(), 0700);
  std::string token = RandomHex();
  agent_tokens_[o.name] = token;
  WriteFile(adir + "/agent.token", token + "\n", 0600);
  int port = FreePort();
  std::string labels;
  for (const auto& [k, v] : o.labels)
    absl::StrAppend(&labels, labels.empty() ? "" : ", ", k, ": ", v);
  std::string tls, controller_tls;
  if (tls_) {
    tls = absl::StrCat("tls: {cert: ", tls_->server_pem, ", key: ", tls_->server_key, "}\n");
    controller_tls =
        absl::StrCat(", tls: {ca: ", o.controller_ca.empty() ? tls_->ca_pem : o.controller_ca, "}");
  }
  WriteFile(adir + "/agent.yaml",
            absl::StrCat(tls, "listen: {address: 127.0.0.1, port: ", port, "}\n",
                         "token_file: ", adir, "/agent.token\n", "state_dir: ", adir, "/state\n",
                         "heartbeat: {interval: 1s}\n", "profiles:\n", "  - name: default\n",
                         "    limits: {cpus: 1, memory: 256MiB, pids: 128, workspace: 64MiB}\n",
                         "    pool: {floor: ", o.pool_floor, ", ceiling: ", o.pool_floor + 2, "}\n",
                         "controller: {url: \"", tls_ ? "https" : "http",
                         "://127.0.0.1:", controller_port_,
                         "\", join_token_file: ", join_token_file_, ", node_name: ", o.name,
                         labels.empty() ? "" : absl::StrCat(", labels: {", labels, "}"),
                         controller_tls, "}\n"),
            0600);
  auto agent = std::make_unique<Daemon>();
  agent->port_ = port;
  absl::Status st = agent->Spawn(Env("MOAT_AGENT_BIN", MOAT_E2E_AGENT_BIN),
                                 {"--config", adir + "/agent.yaml"}, adir + "/agent.log");
  if (!st.ok()) return st;
  agents_[o.name] = std::move(agent);
  if (!o.wait_until_ready) return absl::OkStatus();
  if (!WaitFor([&] { return NodeState(o.name) == "Ready"; }, absl::Seconds(20))) {
    return absl::UnavailableError("the agent did not join: " + agents_[o.name]->Log());
  }
  return absl::OkStatus();
}

std::pair<int, nlohmann::json> Fleet::Call(const std::string& method, const std::string& path,
                                           const std::string& body) {
  return Send(*ClientOf(controller_port_), method, path, body,
              {{"OPEN-SANDBOX-API-KEY", api_key_}});
}

std::pair<int, nlohmann::json> Fleet::CallWith(const std::map<std::string, std::string>& headers,
                                               const std::string& method, const std::string& path,
                                               const std::string& body) {
  httplib::Headers h(headers.begin(), headers.end());
  return Send(*ClientOf(controller_port_), method, path, body, h);
}

std::pair<int, nlohmann::json> Fleet::AgentCall(const std::string& name, const std::string& method,
                                                const std::string& path) {
  return Send(*ClientOf(agents_.at(name)->port(), /*controller=*/false), method, path, "",
              {{"Authorization", "Bearer " + agent_tokens_.at(name)}});
}

std::map<std::string, std::string> FleetTest::AgentSandboxes(const std::string& name) {
  std::map<std::string, std::string> out;
  auto [status, body] = fleet_->AgentCall(name, "GET", "/v1/sandboxes");
  if (status != 200) return out;
  for (const auto& s : body["items"]) {
    if (s["metadata"].contains("moat.controller/id")) {
      out[s["id"]] = s["metadata"]["moat.controller/id"];
    }
  }
  return out;
}

void FleetTest::SetUp() {
  if (geteuid() != 0) GTEST_SKIP() << "agents make real sandboxes: run as root";
  absl::StatusOr<std::unique_ptr<Fleet>> fleet = Fleet::Create();
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  fleet_ = *std::move(fleet);
  StartFleet();
}

std::string Fleet::NodeState(const std::string& name) {
  auto [status, body] = Call("GET", "/v1/nodes");
  if (status != 200 || !body.is_object()) return "";
  for (const auto& n : body["items"]) {
    // Ready only once the first heartbeat brought the agent's token: then it takes sandboxes.
    if (n["name"] == name) return n["state"].get<std::string>();
  }
  return "";
}

bool Fleet::WaitFor(const std::function<bool()>& check, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + Scaled(timeout);
  while (absl::Now() < deadline) {
    if (check()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return check();
}

}  // namespace moat::e2e
