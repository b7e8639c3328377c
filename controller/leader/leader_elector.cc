#include "controller/leader/leader_elector.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace moat::controller {

LeaderElector::LeaderElector(const EtcdClient* client, LeaderElectorOptions options)
    : client_(client), options_(std::move(options)) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  renewer_ = std::thread([this] { RenewLoop(); });
}

void LeaderElector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  client_->CancelCampaigns();
  if (renewer_.joinable()) renewer_.join();
  std::vector<std::thread> campaigns;
  {
    absl::MutexLock lock(&mu_);
    campaigns.swap(campaigns_);
  }
  for (std::thread& t : campaigns) t.join();
}

bool LeaderElector::IsLeader() const {
  absl::MutexLock lock(&mu_);
  return leading_.has_value();
}

std::optional<Fence> LeaderElector::CurrentFence() const {
  absl::MutexLock lock(&mu_);
  if (!leading_) return std::nullopt;
  return Fence{leading_->key, leading_->revision};
}

absl::StatusOr<std::optional<std::string>> LeaderElector::Leader() const {
  return client_->Leader(options_.election);
}

std::optional<std::string> LeaderElector::KnownLeader(
    const std::optional<std::string>& refused) const {
  {
    absl::MutexLock lock(&mu_);
    if (Trusts(refused)) return known_leader_;
  }
  // No leader known (this replica started while none led yet, or it reads its own key while
  // not leading: an election under way), or the caller found the known one not leading: ask
  // etcd now rather than refuse the request until the next renewal. One question at a time and
  // at most one per kLookupInterval, so a storm of writes during an election does not become a
  // storm of reads on etcd.
  absl::MutexLock lookup(&lookup_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (Trusts(refused) || absl::Now() - last_lookup_ < kLookupInterval) {
      return Trusts(refused) ? known_leader_ : std::nullopt;
    }
  }
  absl::StatusOr<std::optional<std::string>> leader = Leader();
  absl::MutexLock lock(&mu_);
  last_lookup_ = absl::Now();
  if (leader.ok()) Learn(*leader);
  return Trusts(refused) ? known_leader_ : std::nullopt;
}

bool LeaderElector::Knows() const {
  return known_leader_.has_value() && (*known_leader_ != options_.identity || leading_);
}

bool LeaderElector::Trusts(const std::optional<std::string>& refused) const {
  return Knows() && known_leader_ != refused;
}

void LeaderElector::Learn(std::optional<std::string> leader) const {
  if (leader == known_leader_) return;
  LogInfo(absl::StrCat("the controllers' leader is ", leader.value_or("(none)")));
  known_leader_ = std::move(leader);
}

int64_t LeaderElector::terms() const {
  absl::MutexLock lock(&mu_);
  return terms_;
}

int64_t LeaderElector::lease() const {
  absl::MutexLock lock(&mu_);
  return lease_;
}

void LeaderElector::SetLeader(std::optional<LeaderKey> key) {
  bool was;
  {
    absl::MutexLock lock(&mu_);
    was = leading_.has_value();
    leading_ = key;
    if (key && !was) ++terms_;
    // This replica knows at once that it leads, or that it no longer does.
    if (key) {
      Learn(options_.identity);
    } else if (known_leader_ == options_.identity) {
      Learn(std::nullopt);
    }
  }
  if (was == key.has_value()) return;
  LogInfo(key ? absl::StrCat("leading the controllers (etcd key ", key->key, ", revision ",
                             key->revision, ")")
              : std::string("no longer leading the controllers"));
  if (on_change_) on_change_(key.has_value());
}

void LeaderElector::CampaignLoop(int64_t lease) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || lease_ != lease) return;
    }
    // etcd's campaign blocks until elected; a timeout only re-asks.
    absl::StatusOr<LeaderKey> won =
        client_->Campaign(options_.election, lease, options_.identity, options_.lease_ttl);
    absl::MutexLock lock(&mu_);
    if (won.ok()) {
      if (lease_ == lease) won_ = *won;
      return;
    }
    if (absl::IsCancelled(won.status())) return;
    auto stop_or_lease_changed = [this, lease]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || lease_ != lease;
    };
    mu_.AwaitWithTimeout(absl::Condition(&stop_or_lease_changed), absl::Milliseconds(200));
  }
}

void LeaderElector::RenewLoop() {
  absl::Time last_renew = absl::Now();
  // A campaign's win, applied at the first renewal that succeeds after it: the campaign has
  // returned, so a win dropped on a failed renewal would never come again while etcd, holding
  // the key on a lease this loop keeps alive, names this replica the leader.
  std::optional<LeaderKey> won;
  while (true) {
    int64_t lease;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      lease = lease_;
    }
    if (lease == 0) {
      absl::StatusOr<int64_t> granted = client_->LeaseGrant(options_.lease_ttl);
      absl::MutexLock lock(&mu_);
      if (granted.ok()) {
        lease_ = lease = *granted;
        last_renew = absl::Now();
        campaigns_.emplace_back([this, l = *granted] { CampaignLoop(l); });
      } else {
        LogWarning(absl::StrCat("leader election: no etcd lease: ", granted.status().message()));
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.renew_interval);
        continue;
      }
    }
    // Who leads, read off the request path: first at once (a replica that starts forwards from
    // its first request on), then once per renew_interval.
    if (absl::StatusOr<std::optional<std::string>> leader = Leader(); leader.ok()) {
      absl::MutexLock lock(&mu_);
      Learn(*leader);
    }
    {
      // Wake at once for a campaign's win, else once per renew_interval.
      absl::MutexLock lock(&mu_);
      auto woken = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || won_.has_value(); };
      mu_.AwaitWithTimeout(absl::Condition(&woken), options_.renew_interval);
      if (stopping_) break;
      if (won_.has_value()) won = *std::exchange(won_, std::nullopt);
    }
    absl::StatusOr<absl::Duration> renewed = client_->LeaseKeepAlive(lease);
    if (renewed.ok()) {
      last_renew = absl::Now();
      // A campaign can return after its lease expired (etcd does not re-check the key then):
      // only a lease that is still alive makes a leader.
      if (won && won->lease == lease) SetLeader(won);
      won.reset();
      continue;
    }
    if (absl::IsNotFound(renewed.status())) {
      LogWarning(absl::StrCat("leader election: etcd lease ", lease, " expired"));
      won.reset();  // Its key went with the lease.
      SetLeader(std::nullopt);
      absl::MutexLock lock(&mu_);
      lease_ = 0;  // A new lease and a new campaign.
      continue;
    }
    if (IsLeader() && absl::Now() - last_renew > options_.renew_deadline) {
      LogWarning(absl::StrCat("leader election: the lease was not renewed for ",
                              absl::FormatDuration(options_.renew_deadline),
                              "; stepping down: ", renewed.status().message()));
      SetLeader(std::nullopt);
      // The lease may still be alive: campaign again with it (it keeps its place).
      absl::MutexLock lock(&mu_);
      campaigns_.emplace_back([this, lease] { CampaignLoop(lease); });
    }
  }
  std::optional<LeaderKey> leading;
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    leading = leading_;
    lease = lease_;
  }
  if (leading) {
    if (absl::Status st = client_->Resign(*leading); !st.ok()) {
      LogWarning(absl::StrCat("leader election: resigning: ", st.message()));
    }
    SetLeader(std::nullopt);
  }
  if (lease != 0) (void)client_->LeaseRevoke(lease);
}

}  // namespace moat::controller
