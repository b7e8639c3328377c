#include "controller/nodes.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "util/token.h"

namespace moat::controller {

using scheduler::NodeState;

absl::StatusOr<std::string> NodeTable::Join(const std::string& name, NodeReport report) {
  ASSIGN_OR_RETURN(std::string session, NewToken());
  report.arch = scheduler::NormalizeArch(report.arch);
  absl::MutexLock lock(&mu_);
  Node& node = nodes_[name];
  absl::Time now = clock_->Now();
  if (node.session_token.empty()) node.joined_at = now;
  node.report = std::move(report);
  node.session_token = session;
  node.state = NodeState::kReady;
  node.last_heartbeat = now;
  node.away_until = absl::InfinitePast();
  ChangedLocked(name, node);
  return session;
}

absl::StatusOr<bool> NodeTable::Heartbeat(const std::string& name, absl::string_view session_token,
                                          NodeReport report, absl::Duration away) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    return absl::NotFoundError(absl::StrCat("node \"", name, "\" has not joined; join first"));
  }
  Node& node = it->second;
  if (!ConstantTimeEquals(session_token, node.session_token)) {
    return absl::UnauthenticatedError(
        "wrong or stale node session token; join again to get a new one");
  }
  if (node.state == NodeState::kLost) {
    // Its sandboxes were already given up: it must join again so the reconciler sees it.
    return absl::NotFoundError(absl::StrCat("node \"", name, "\" was lost; join again"));
  }
  report.arch = scheduler::NormalizeArch(report.arch);
  bool first = node.report.agent_token.empty() && !report.agent_token.empty();
  node.report = std::move(report);
  node.last_heartbeat = clock_->Now();
  const bool leaving = away > absl::ZeroDuration();
  node.away_until = leaving ? node.last_heartbeat + away : absl::InfinitePast();
  node.state = leaving ? NodeState::kNotReady : NodeState::kReady;
  ChangedLocked(name, node);
  return first;
}

void NodeTable::Clear() {
  absl::MutexLock lock(&mu_);
  nodes_.clear();
  snapshot_ = nullptr;
}

std::vector<std::string> NodeTable::Tick() {
  std::vector<std::string> lost;
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  for (auto& [name, node] : nodes_) {
    absl::Duration silent = now - node.last_heartbeat;
    NodeState next = node.state;
    if (silent >= options_.lost_after && now >= node.away_until) {
      next = NodeState::kLost;
    } else if (silent >= options_.heartbeat_interval * options_.misses || now < node.away_until) {
      next = NodeState::kNotReady;
    }
    if (next == node.state) continue;
    if (next == NodeState::kLost) {
      lost.push_back(name);
      // Its sandboxes are gone with it: nothing stays reserved.
      node.allocated = {};
      node.tenant_sandboxes.clear();
    }
    node.state = next;
    ChangedLocked(name, node);
  }
  return lost;
}

absl::Status NodeTable::SetCordoned(const std::string& name, bool cordoned) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("no node \"", name, "\""));
  it->second.cordoned = cordoned;
  if (!cordoned) it->second.draining = false;
  ChangedLocked(name, it->second);
  return absl::OkStatus();
}

absl::Status NodeTable::SetDraining(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("no node \"", name, "\""));
  it->second.cordoned = true;
  it->second.draining = true;
  ChangedLocked(name, it->second);
  return absl::OkStatus();
}

void NodeTable::ChangedLocked(const std::string& name, Node& node) {
  auto info = std::make_shared<scheduler::NodeInfo>();
  info->name = name;
  info->arch = node.report.arch;
  info->state = SeenState(node);
  info->cordoned = node.cordoned;
  info->allocatable = node.report.allocatable;
  info->allocated = node.allocated;
  info->profiles.insert(node.report.profiles.begin(), node.report.profiles.end());
  info->warm = node.report.warm;
  info->labels = node.report.labels;
  info->taints = node.report.taints;
  info->tenant_sandboxes = node.tenant_sandboxes;
  node.info = std::move(info);
  snapshot_ = nullptr;
}

scheduler::SnapshotPtr NodeTable::Snapshot() {
  absl::MutexLock lock(&mu_);
  if (snapshot_ != nullptr) return snapshot_;
  auto s = std::make_shared<scheduler::Snapshot>();
  s->overcommit = options_.overcommit;
  s->nodes.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) s->nodes.push_back(node.info);
  snapshot_ = std::move(s);
  return snapshot_;
}

absl::Status NodeTable::Reserve(const std::string& name, const std::string& tenant,
                                const scheduler::Resources& resources) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("no node \"", name, "\""));
  Node& node = it->second;
  if (node.state != NodeState::kReady || node.cordoned) {
    return absl::ResourceExhaustedError(absl::StrCat("node \"", name, "\" is no longer ready"));
  }
  scheduler::NodeInfo live;
  live.allocatable = node.report.allocatable;
  live.allocated = node.allocated;
  scheduler::FilterResult fit = FitsResources(resources, live, options_.overcommit);
  if (!fit.fits()) {
    return absl::ResourceExhaustedError(absl::StrCat("node \"", name, "\": ", fit.reason));
  }
  node.allocated += resources;
  ++node.tenant_sandboxes[tenant];
  ChangedLocked(name, node);
  return absl::OkStatus();
}

void NodeTable::Release(const std::string& name, const std::string& tenant,
                        const scheduler::Resources& resources) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  it->second.allocated -= resources;
  auto t = it->second.tenant_sandboxes.find(tenant);
  if (t != it->second.tenant_sandboxes.end() && --t->second <= 0) {
    it->second.tenant_sandboxes.erase(t);
  }
  ChangedLocked(name, it->second);
}

absl::StatusOr<AgentEndpoint> NodeTable::Endpoint(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("no node \"", name, "\""));
  if (it->second.state == NodeState::kLost) {
    return absl::UnavailableError(absl::StrCat("node \"", name, "\" is lost"));
  }
  if (it->second.report.agent_token.empty()) {
    return absl::UnavailableError(
        absl::StrCat("node \"", name, "\" joined but has not sent its first heartbeat"));
  }
  return AgentEndpoint{it->second.report.agent_url, it->second.report.agent_token,
                       options_.agent_ca_file};
}

NodeState NodeTable::SeenState(const Node& node) {
  if (node.state == NodeState::kLost) return node.state;
  return node.report.agent_token.empty() ? NodeState::kNotReady : node.state;
}

NodeView NodeTable::ViewLocked(const std::string& name, const Node& node) const {
  NodeView v;
  v.name = name;
  v.report = node.report;
  v.report.agent_token.clear();  // Never shown.
  v.state = SeenState(node);
  v.cordoned = node.cordoned;
  v.draining = node.draining;
  v.allocated = node.allocated;
  for (const auto& [tenant, n] : node.tenant_sandboxes) v.sandboxes += n;
  v.joined_at = node.joined_at;
  v.last_heartbeat = node.last_heartbeat;
  if (node.state != NodeState::kLost && clock_->Now() < node.away_until) {
    v.away_until = node.away_until;
  }
  return v;
}

std::vector<NodeView> NodeTable::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<NodeView> out;
  for (const auto& [name, node] : nodes_) out.push_back(ViewLocked(name, node));
  return out;
}

std::optional<NodeView> NodeTable::Get(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  return ViewLocked(name, it->second);
}

bool NodeTable::AnyNodeHasArch(absl::string_view arch) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, node] : nodes_) {
    if (node.report.arch == arch) return true;
  }
  return false;
}

std::map<std::pair<std::string, std::string>, int> NodeTable::CountByStateAndArch() const {
  absl::MutexLock lock(&mu_);
  std::map<std::pair<std::string, std::string>, int> out;
  for (const auto& [name, node] : nodes_) {
    ++out[{std::string(scheduler::NodeStateName(SeenState(node))), node.report.arch}];
  }
  return out;
}

}  // namespace moat::controller
