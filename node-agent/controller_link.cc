#include "node-agent/controller_link.h"

#include <httplib.h>
#include <sys/utsname.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sandbox/cgroup/cgroup.h"
#include "util/http/client.h"
#include "util/join_auth.h"
#include "util/log.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::agent {
namespace {

using nlohmann::json;

std::unique_ptr<httplib::Client> Client(const ControllerLinkOptions& options) {
  auto client = std::make_unique<httplib::Client>(options.controller_url);
  http::TrustCa(*client, options.ca_file);
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(10, 0);
  client->set_write_timeout(10, 0);
  // httplib writes a request's head and body in two segments: with Nagle's algorithm the body
  // waits for the controller's delayed ACK of the head, ~40 ms on Linux.
  client->set_tcp_nodelay(true);
  return client;
}

absl::Status FromHttp(const httplib::Result& res, absl::string_view what) {
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the controller did not answer: ",
                     http::DescribeFailure(res.error(), "controller.tls.ca")));
  }
  if (res->status == 200) return absl::OkStatus();
  std::string text =
      absl::StrCat(what, ": the controller answered ", res->status, ": ", res->body.substr(0, 300));
  if (res->status == 401) return absl::UnauthenticatedError(text);
  if (res->status == 404) return absl::NotFoundError(text);
  return absl::UnavailableError(text);
}

}  // namespace

json NodeReportJson(const NodeFacts& f) {
  struct utsname u;
  uname(&u);
  std::string cgroup = "unknown";
  if (auto layout = sandbox::DetectCgroupLayout(); layout.ok()) {
    cgroup = layout->kind == sandbox::CgroupLayout::Kind::kV1   ? "v1"
             : layout->kind == sandbox::CgroupLayout::Kind::kV2 ? "v2"
                                                                : "hybrid";
  }
  json limits = json::object();
  for (const auto& [name, l] : f.profile_limits) {
    limits[name] = {{"cpus", l.cpus}, {"memory_bytes", l.memory_bytes}};
  }
  json taints = json::array();
  for (const auto& [k, v] : f.taints) taints.push_back({{"key", k}, {"value", v}});
  return {{"agent_url", f.agent_url},
          {"agent_token", f.agent_token},
          {"arch", u.machine},
          {"kernel", u.release},
          {"cgroup", cgroup},
          {"version", f.version},
          {"allocatable", {{"cpu", f.cpu}, {"memory", f.memory}, {"pids", f.pids}}},
          {"used", {{"cpu", f.cpu_allocated}, {"memory", f.memory_used}, {"pids", f.pids_used}}},
          {"profiles", f.profiles},
          {"profile_limits", limits},
          {"warm", f.warm},
          {"labels", f.labels},
          {"taints", taints}};
}

ControllerLink::ControllerLink(ControllerLinkOptions options, NodeReportFn report)
    : options_(std::move(options)), report_(std::move(report)) {}

ControllerLink::~ControllerLink() { Stop(); }

void ControllerLink::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ControllerLink::Stop() {
  if (!thread_.joinable()) return;
  if (!stop_.HasBeenNotified()) stop_.Notify();
  thread_.join();
}

void ControllerLink::Leave(absl::Duration away) {
  Stop();
  std::string session;
  {
    absl::MutexLock lock(&mu_);
    session = session_;
  }
  if (session.empty()) return;
  absl::Status sent = Heartbeat(session, away);
  if (sent.ok()) {
    LogInfo(absl::StrCat("told the controller the sandboxes stay ", absl::FormatDuration(away),
                         " for the next agent"));
  } else {
    LogWarning(absl::StrCat("could not tell the controller the sandboxes stay (it gives the node ",
                            "up after its lost_after): ", sent.message()));
  }
}

bool ControllerLink::Healthy() const {
  absl::MutexLock lock(&mu_);
  return healthy_;
}

absl::StatusOr<std::string> ControllerLink::Join() {
  ASSIGN_OR_RETURN(std::string nonce, NewToken());
  int64_t now = absl::ToUnixSeconds(absl::Now());
  json report = report_();
  report.erase("agent_token");  // Not before the controller proved itself.
  json body = {{"name", options_.node_name},
               {"nonce", nonce},
               {"timestamp", now},
               {"proof", JoinAgentProof(options_.join_token, options_.node_name, nonce, now)},
               {"report", report}};
  auto client = Client(options_);
  auto res = client->Post("/internal/v1/nodes/join", body.dump(), "application/json");
  RETURN_IF_ERROR(FromHttp(res, "joining"));
  json answer = json::parse(res->body, nullptr, false);
  if (!answer.is_object() || !answer.contains("proof") || !answer["proof"].is_string() ||
      !answer.contains("session_token") || !answer["session_token"].is_string()) {
    return absl::UnavailableError("joining: the controller's answer lacks proof or session");
  }
  std::string expected = JoinControllerProof(options_.join_token, options_.node_name, nonce);
  if (!ConstantTimeEquals(expected, answer["proof"].get<std::string>())) {
    return absl::UnauthenticatedError(
        "joining: the controller's proof is wrong: it does not hold our join token; is "
        "controller.url the right controller?");
  }
  return answer["session_token"].get<std::string>();
}

absl::Status ControllerLink::Heartbeat(const std::string& session, absl::Duration away) {
  json body = {{"report", report_()}};
  if (away > absl::ZeroDuration()) {
    // Whole seconds, at least 1, at most what the controller takes (3600).
    body["away_for_seconds"] =
        std::clamp<int64_t>(absl::ToInt64Seconds(absl::Ceil(away, absl::Seconds(1))), 1, 3600);
  }
  auto client = Client(options_);
  httplib::Headers headers = {{"Authorization", absl::StrCat("Bearer ", session)}};
  return FromHttp(
      client->Post(absl::StrCat("/internal/v1/nodes/", options_.node_name, "/heartbeat"), headers,
                   body.dump(), "application/json"),
      "heartbeat");
}

void ControllerLink::Loop() {
  std::string session;
  absl::Status last = absl::OkStatus();
  while (!stop_.HasBeenNotified()) {
    absl::Status st;
    if (session.empty()) {
      absl::StatusOr<std::string> joined = Join();
      st = joined.status();
      if (joined.ok()) {
        session = *joined;
        LogInfo(absl::StrCat("joined the controller at ", options_.controller_url, " as ",
                             options_.node_name));
        st = Heartbeat(session);  // At once: it carries the node token the controller needs.
      }
    } else {
      st = Heartbeat(session);
    }
    if (!st.ok() && (absl::IsUnauthenticated(st) || absl::IsNotFound(st))) session.clear();
    if (!st.ok() && st.ToString() != last.ToString()) LogWarning(st.message());
    last = st;
    {
      absl::MutexLock lock(&mu_);
      healthy_ = st.ok() && !session.empty();
      session_ = session;
    }
    // After a refused heartbeat, join again soon; otherwise wait one interval.
    stop_.WaitForNotificationWithTimeout(session.empty() && !st.ok()
                                             ? std::min(options_.interval, absl::Seconds(1))
                                             : options_.interval);
  }
}

}  // namespace moat::agent
