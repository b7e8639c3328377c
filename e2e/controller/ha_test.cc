// Several controller replicas on etcd (issue 13), end to end on loopback: 3 etcd members, 3
// real moat-controller replicas and 2 real agents. The leader is killed with SIGKILL during a
// create storm, then a follower, then etcd members, down to quorum loss.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/testing/etcd_cluster.h"
#include "e2e/controller/fleet.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kLeaseTtl = absl::Seconds(6);  // Fleet::StartReplica's.

class HaE2eTest : public FleetTest {
 protected:
  void StartFleet() override {
    if (!controller::testing::EtcdInstalled()) GTEST_SKIP() << "etcd not installed";
    ASSERT_TRUE(etcd_.Start().ok()) << "etcd: logs in " << etcd_.dir();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(fleet_->StartReplica(i, etcd_.Endpoints()).ok());
    ASSERT_TRUE(Fleet::WaitFor([&] { return Leaders().size() == 1; }, absl::Seconds(15)));
  }

  bool IsLeader(int i) {
    if (!alive_.contains(i)) return false;
    httplib::Client c("127.0.0.1", fleet_->replica(i).port());
    c.set_read_timeout(2, 0);
    auto r = c.Get("/metrics");
    return r && r->status == 200 && absl::StrContains(r->body, "\nmoat_controller_leader 1");
  }
  std::vector<int> Leaders() {
    std::vector<int> out;
    for (int i : alive_) {
      if (IsLeader(i)) out.push_back(i);
    }
    return out;
  }
  int AFollower(int other_than = -1) {
    for (int i : alive_) {
      if (!IsLeader(i) && i != other_than) return i;
    }
    return -1;
  }
  void KillReplica(int i) {
    fleet_->replica(i).Kill(SIGKILL);
    alive_.erase(i);
  }

  // The replicas stop before etcd, which is destroyed before the base class's fleet_.
  void TearDown() override { fleet_.reset(); }

  controller::testing::EtcdCluster etcd_{3};
  std::set<int> alive_ = {0, 1, 2};
};

// SIGKILL of the leader while two clients create through the followers: another replica leads
// within the lease TTL, every acknowledged create exists exactly once, and the agents run
// nothing the controllers have no record of. Then a follower is lost: nothing changes.
TEST_F(HaE2eTest, LeaderKillDuringACreateStormThenFollowerLoss) {
  const int leader = Leaders().at(0);
  const int f1 = AFollower(), f2 = AFollower(f1);
  ASSERT_GE(f1, 0);
  ASSERT_GE(f2, 0);
  // The agents reach the fleet through a follower, as through a load balancer.
  fleet_->Target(f1);
  for (const char* name : {"a1", "a2"}) {
    absl::Status st = fleet_->StartAgent({.name = name, .pool_floor = 2});
    ASSERT_TRUE(st.ok()) << st << "\nreplica " << f1 << ": " << fleet_->replica(f1).Log()
                         << "\nleader: " << fleet_->replica(leader).Log();
  }

  std::mutex mu;
  std::set<std::string> acknowledged;
  std::atomic<bool> stop{false};
  std::atomic<int> unavailable{0};
  std::vector<std::thread> clients;
  for (int c : {f1, f2}) {
    clients.emplace_back([&, c] {
      while (!stop) {
        auto [status, sb] = fleet_->CallReplica(c, "POST", "/v1/sandboxes", kCreate);
        if (status == 202 && sb.is_object() && sb["status"]["state"] == "Running") {
          std::lock_guard lock(mu);
          acknowledged.insert(sb["id"].get<std::string>());
        } else if (status == 503) {
          ++unavailable;
          absl::SleepFor(absl::Milliseconds(100));
        }
      }
    });
  }
  ASSERT_TRUE(Fleet::WaitFor(
      [&] {
        std::lock_guard lock(mu);
        return acknowledged.size() >= 4;
      },
      absl::Seconds(60)));
  // The election settled before the storm: no replica refused a create (503) before the kill.
  EXPECT_EQ(unavailable.load(), 0) << "a follower refused creates with a leader in place";
  absl::Time killed = absl::Now();
  KillReplica(leader);
  ASSERT_TRUE(Fleet::WaitFor([&] { return Leaders().size() == 1; }, kLeaseTtl + absl::Seconds(4)))
      << "no new leader";
  absl::Duration failover = absl::Now() - killed;
  std::printf("new leader %s after the leader's SIGKILL (lease TTL %s)\n",
              absl::FormatDuration(failover).c_str(), absl::FormatDuration(kLeaseTtl).c_str());
  EXPECT_LT(failover, kLeaseTtl + absl::Seconds(2));
  // Creates go on after the failover.
  size_t before;
  {
    std::lock_guard lock(mu);
    before = acknowledged.size();
  }
  EXPECT_TRUE(Fleet::WaitFor(
      [&] {
        std::lock_guard lock(mu);
        return acknowledged.size() >= before + 2;
      },
      absl::Seconds(30)))
      << "no create succeeded after the failover";
  stop = true;
  for (auto& t : clients) t.join();

  ASSERT_TRUE(Fleet::WaitFor(
      [&] { return fleet_->NodeState("a1") == "Ready" && fleet_->NodeState("a2") == "Ready"; },
      absl::Seconds(20)));
  // From the leader: a follower's copy may be a second behind (it says so: X-Moat-Stale).
  const int new_leader = Leaders().at(0);
  std::map<std::string, std::string> headers;
  auto [status, list] =
      fleet_->CallReplica(new_leader, "GET", "/v1/sandboxes?pageSize=200", "", &headers);
  ASSERT_EQ(status, 200);
  EXPECT_FALSE(headers.contains("X-Moat-Stale"));
  auto [fstatus, flist] = fleet_->CallReplica(AFollower(), "GET", "/v1/sandboxes", "", &headers);
  EXPECT_EQ(fstatus, 200);
  EXPECT_THAT(headers["X-Moat-Stale"], HasSubstr("follower"));
  std::multiset<std::string> listed;
  for (const auto& s : list["items"]) listed.insert(s["id"].get<std::string>());
  for (const std::string& id : acknowledged) EXPECT_EQ(listed.count(id), 1u) << id;
  ASSERT_TRUE(Fleet::WaitFor(
      [&] {
        for (const char* agent : {"a1", "a2"}) {
          for (const auto& [agent_id, controller_id] : AgentSandboxes(agent)) {
            if (!listed.contains(controller_id)) return false;
          }
        }
        return true;
      },
      absl::Seconds(15)))
      << "sandboxes left on the agents without a record";

  // The killed replica comes back as a follower; then it is lost again: nothing changes.
  const int now_leader = Leaders().at(0);
  ASSERT_TRUE(fleet_->StartReplica(leader, etcd_.Endpoints()).ok());
  alive_.insert(leader);
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(Leaders(), std::vector<int>{now_leader}) << "the restarted replica took over";
  auto [rs, rlist] = fleet_->CallReplica(leader, "GET", "/v1/sandboxes?pageSize=200", "", &headers);
  EXPECT_EQ(rs, 200);
  EXPECT_THAT(headers["X-Moat-Stale"], HasSubstr("follower"));
  EXPECT_EQ(rlist["items"].size(), list["items"].size());
  KillReplica(leader);
  auto [cs, sb] = fleet_->CallReplica(f1, "POST", "/v1/sandboxes", kCreate);
  EXPECT_EQ(cs, 202) << sb.dump();
  EXPECT_EQ(Leaders(), std::vector<int>{now_leader});
}

// Creates answered Pending (no agent yet) through a follower, then SIGKILL of the leader: the
// sandboxes are in etcd, so the followers list them and the new leader places each exactly once
// when an agent joins.
TEST_F(HaE2eTest, PendingSandboxesSurviveALeaderKillAndArePlacedOnceByTheNext) {
  const int leader = Leaders().at(0);
  const int f1 = AFollower();
  std::mutex mu;
  std::set<std::string> pending;
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&] {
      // 503 only while the leadership changes (a follower asks etcd while it knows no leader).
      std::pair<int, nlohmann::json> r;
      for (int attempt = 0; attempt < 20; ++attempt) {
        r = fleet_->CallReplica(f1, "POST", "/v1/sandboxes", kCreate);
        if (r.first != 503) break;
        absl::SleepFor(absl::Milliseconds(500));
      }
      auto& [status, sb] = r;
      if (status == 202 && sb["status"]["state"] == "Pending") {
        std::lock_guard lock(mu);
        pending.insert(sb["id"].get<std::string>());
      }
    });
  }
  for (auto& t : clients) t.join();
  ASSERT_EQ(pending.size(), 3u) << "no agent: each create answers Pending after create_timeout";
  // A follower's copy knows them (it is refreshed from etcd each second).
  EXPECT_TRUE(Fleet::WaitFor(
      [&] {
        auto [s, list] = fleet_->CallReplica(f1, "GET", "/v1/sandboxes?state=Pending");
        return s == 200 && list["items"].size() == 3;
      },
      absl::Seconds(5)));
  KillReplica(leader);
  ASSERT_TRUE(Fleet::WaitFor([&] { return Leaders().size() == 1; }, kLeaseTtl + absl::Seconds(4)))
      << "no new leader";
  const int new_leader = Leaders().at(0);
  auto [status, list] = fleet_->CallReplica(new_leader, "GET", "/v1/sandboxes?state=Pending");
  ASSERT_EQ(status, 200);
  std::set<std::string> listed;
  for (const auto& s : list["items"]) listed.insert(s["id"].get<std::string>());
  EXPECT_EQ(listed, pending) << "Pending sandboxes lost with the leader";
  fleet_->Target(f1);
  ASSERT_TRUE(fleet_->StartAgent({.name = "a1", .pool_floor = 0}).ok());
  EXPECT_TRUE(Fleet::WaitFor(
      [&] {
        for (const std::string& id : pending) {
          auto [s, sb] = fleet_->CallReplica(new_leader, "GET", "/v1/sandboxes/" + id);
          if (sb["status"]["state"] != "Running") return false;
        }
        return true;
      },
      absl::Seconds(20)))
      << fleet_->replica(new_leader).Log();
  std::multiset<std::string> on_agent;
  for (const auto& [agent_id, controller_id] : AgentSandboxes("a1")) on_agent.insert(controller_id);
  EXPECT_EQ(on_agent, std::multiset<std::string>(pending.begin(), pending.end()));
}

// One etcd member of three lost changes nothing; two lost (no quorum): writes get a 503 that
// says so, reads answer from a replica's copy and say they may be stale; never a wrong answer.
TEST_F(HaE2eTest, EtcdMemberLossThenQuorumLoss) {
  const int leader = Leaders().at(0);
  const int follower = AFollower();
  fleet_->Target(follower);
  ASSERT_TRUE(fleet_->StartAgent({.name = "a1", .pool_floor = 1}).ok());
  // A Running one (a Pending one would do too: it is stored once its create answers).
  std::string id;
  for (int i = 0; i < 5 && id.empty(); ++i) {
    auto [s1, sb1] = fleet_->CallReplica(follower, "POST", "/v1/sandboxes", kCreate);
    ASSERT_EQ(s1, 202) << sb1.dump();
    if (sb1["status"]["state"] == "Running") id = sb1["id"];
  }
  ASSERT_FALSE(id.empty()) << "no create was placed at once";
  ASSERT_TRUE(Fleet::WaitFor(
      [&] { return fleet_->CallReplica(follower, "GET", "/v1/sandboxes/" + id).first == 200; },
      absl::Seconds(5)))
      << "the follower's copy never showed the sandbox";

  etcd_.Kill(0);
  ASSERT_TRUE(etcd_.WaitHealthy(2).ok());
  auto [s2, sb2] = fleet_->CallReplica(follower, "POST", "/v1/sandboxes", kCreate);
  EXPECT_EQ(s2, 202) << sb2.dump();
  EXPECT_EQ(Leaders(), std::vector<int>{leader});

  etcd_.Kill(1);
  // Writes: 503 with a message that names the cause, on the leader and through a follower.
  bool refused = Fleet::WaitFor(
      [&] {
        auto [s, body] = fleet_->CallReplica(follower, "POST", "/v1/sandboxes", kCreate);
        return s == 503;
      },
      absl::Seconds(30));
  EXPECT_TRUE(refused) << "a write succeeded without an etcd quorum";
  auto [s3, body3] = fleet_->CallReplica(leader, "DELETE", "/v1/sandboxes/" + id);
  EXPECT_EQ(s3, 503) << body3.dump();
  // Reads: the known sandbox, marked as possibly stale.
  std::map<std::string, std::string> headers;
  auto [s4, body4] = fleet_->CallReplica(follower, "GET", "/v1/sandboxes/" + id, "", &headers);
  EXPECT_EQ(s4, 200) << body4.dump() << "\nfollower: " << fleet_->replica(follower).Log()
                     << "\nleader: " << fleet_->replica(leader).Log();
  EXPECT_TRUE(headers.contains("X-Moat-Stale"));
  EXPECT_THAT(headers["X-Moat-Stale"], HasSubstr("store-unreachable"));

  // The quorum back: writes work again.
  etcd_.StartMember(1);
  ASSERT_TRUE(etcd_.WaitHealthy(2).ok());
  EXPECT_TRUE(Fleet::WaitFor(
      [&] {
        auto [s, body] = fleet_->CallReplica(follower, "POST", "/v1/sandboxes", kCreate);
        return s == 202;
      },
      absl::Seconds(40)));
}

// Issue 13's ha_bench defect: a follower learned who leads only a renew_interval after it
// started, and until then refused every create (503 NO_LEADER) it should have forwarded. Once
// the election has settled, every replica serves creates: all three at once right after the
// leader is known (no agent: each create answers Pending), and a follower killed and started
// again from its first request on.
TEST_F(HaE2eTest, EveryReplicaServesCreatesOnceALeaderIsKnown) {
  auto create_through_each = [&](const char* when) {
    std::vector<std::thread> clients;
    std::mutex mu;
    std::vector<std::string> refused;
    for (int i : alive_) {
      clients.emplace_back([&, i] {
        auto [status, sb] = fleet_->CallReplica(i, "POST", "/v1/sandboxes", kCreate);
        if (status != 202) {
          std::lock_guard lock(mu);
          refused.push_back(absl::StrCat("replica ", i, IsLeader(i) ? " (the leader)" : "",
                                         " answered ", status, " ", sb.dump()));
        }
      });
    }
    for (auto& t : clients) t.join();
    EXPECT_THAT(refused, ::testing::IsEmpty()) << when;
  };
  create_through_each("right after the election");

  const int follower = AFollower();
  ASSERT_GE(follower, 0);
  KillReplica(follower);
  ASSERT_TRUE(fleet_->StartReplica(follower, etcd_.Endpoints()).ok());
  alive_.insert(follower);
  auto [status, sb] = fleet_->CallReplica(follower, "POST", "/v1/sandboxes", kCreate);
  EXPECT_EQ(status, 202) << "a follower started again refused its first create: " << sb.dump()
                         << "\n"
                         << fleet_->replica(follower).Log();
  create_through_each("after a follower's restart");
}

// Held commands across an etcd failover (issue 13, point 4 with point 2): every replica restarted
// with a short approval timeout (followers first, then the leader with SIGTERM: it resigns, so
// the hand-over is at once).
class HaApprovalE2eTest : public HaE2eTest {
 protected:
  static constexpr absl::Duration kApprovalTimeout = absl::Seconds(20);

  void StartFleet() override {
    HaE2eTest::StartFleet();
    if (IsSkipped() || HasFatalFailure()) return;
    fleet_->set_extra_config(absl::StrCat(
        "precheck: {approval_timeout: ", absl::ToInt64Seconds(kApprovalTimeout), "s}\n"));
    const int leader = Leaders().at(0);
    std::vector<int> order = {AFollower(), AFollower(AFollower()), leader};
    for (int i : order) {
      fleet_->replica(i).Kill(i == leader ? SIGTERM : SIGKILL);
      ASSERT_TRUE(fleet_->StartReplica(i, etcd_.Endpoints()).ok());
    }
    ASSERT_TRUE(Fleet::WaitFor([&] { return Leaders().size() == 1; }, absl::Seconds(15)));
    fleet_->Target(Leaders().at(0));
    ASSERT_TRUE(fleet_->StartAgent({.name = "a1", .pool_floor = 1}).ok());
    auto [st, sb] = fleet_->CallReplica(AFollower(), "POST", "/v1/sandboxes", kCreate);
    ASSERT_EQ(st, 202) << sb.dump();
    ASSERT_EQ(sb["status"]["state"], "Running") << sb.dump();
    command_ = "/v1/sandboxes/" + sb["id"].get<std::string>() + "/proxy/44772/command";
  }

  // A command through replica i's proxy route, as the tenant: the answer (nullopt: the
  // connection closed, as when the replica holding it dies).
  std::optional<httplib::Response> Command(int i, const std::string& body) {
    httplib::Client c("127.0.0.1", fleet_->replica(i).port());
    c.set_read_timeout(60, 0);
    auto r =
        c.Post(command_, {{"OPEN-SANDBOX-API-KEY", fleet_->api_key()}}, body, "application/json");
    if (!r) return std::nullopt;
    return *r;
  }
  std::pair<int, nlohmann::json> Admin(int i, const std::string& method, const std::string& path,
                                       const std::string& body = "") {
    fleet_->Target(i);
    return fleet_->CallWith({{"Authorization", "Bearer " + fleet_->admin_key()}}, method, path,
                            body);
  }
  // The pending holds as replica i lists them (the leader's, a follower forwards the call).
  std::map<std::string, std::string> Pending(int i) {
    std::map<std::string, std::string> out;  // id -> command
    auto [s, list] = Admin(i, "GET", "/v1/admin/approvals");
    if (s != 200) return out;
    for (const auto& a : list["items"]) out[a["id"]] = a["command"].dump();
    return out;
  }
  // Sends `body` to replica i on a thread and waits until the hold is listed (whose id is not
  // in `known`); the thread's answer lands in `*answer`.
  std::string Hold(int i, const std::string& body, std::optional<httplib::Response>* answer,
                   std::vector<std::thread>* waiters, const std::set<std::string>& known = {}) {
    waiters->emplace_back([this, i, body, answer] { *answer = Command(i, body); });
    std::string id;
    EXPECT_TRUE(Fleet::WaitFor(
        [&] {
          for (const auto& [pid, cmd] : Pending(i)) {
            if (!known.contains(pid)) id = pid;
          }
          return !id.empty();
        },
        absl::Seconds(15)))
        << "the command was never held";
    return id;
  }
  // SIGKILL of the leader, its restart as a follower; the new leader's index.
  int KillTheLeader() {
    const int leader = Leaders().at(0);
    KillReplica(leader);
    EXPECT_TRUE(Fleet::WaitFor([&] { return Leaders().size() == 1; }, kLeaseTtl + absl::Seconds(4)))
        << "no new leader";
    EXPECT_TRUE(fleet_->StartReplica(leader, etcd_.Endpoints()).ok());
    alive_.insert(leader);
    return Leaders().empty() ? -1 : Leaders().at(0);
  }

  std::string command_;
};

// A held command outlives the leader that held it: approved on the next leader through a
// follower, its retry runs once (the same command again is held anew); a hold rejected after
// the next failover answers its retry 403 with the reason; an undecided one times out there.
TEST_F(HaApprovalE2eTest, HoldsSurviveALeaderKillDecidedOnTheNextLeaderOrTimedOut) {
  const std::string approved_cmd = R"({"command": "curl -s http://127.0.0.1:9/a | sh"})";
  const std::string rejected_cmd = R"({"command": "curl -s http://127.0.0.1:9/r | sh"})";
  std::optional<httplib::Response> a_first, b_first, c_first;
  std::vector<std::thread> waiters;
  // Joined on every way out: a failed assertion must not leave a joinable thread, whose
  // destructor would abort the whole binary (and every test after this one).
  absl::Cleanup join_waiters = [&] {
    for (std::thread& t : waiters) {
      if (t.joinable()) t.join();
    }
  };

  // A: held on the leader; the leader is killed while its caller waits.
  const int first = Leaders().at(0);
  const std::string a = Hold(first, approved_cmd, &a_first, &waiters);
  ASSERT_FALSE(a.empty());
  const int second = KillTheLeader();
  ASSERT_GE(second, 0);
  ASSERT_NE(second, first);
  waiters[0].join();
  EXPECT_FALSE(a_first && a_first->status == 200) << "ran without an approval";
  // The next leader lists A and takes the decision, sent through a follower.
  const int f = AFollower();
  ASSERT_TRUE(Fleet::WaitFor([&] { return Pending(f).contains(a); }, absl::Seconds(10)))
      << "the hold was lost with the leader";
  auto [ds, d] = Admin(f, "POST", "/v1/admin/approvals/" + a + "/approve",
                       R"({"reason": "checked after the failover"})");
  ASSERT_EQ(ds, 200) << d.dump();
  EXPECT_EQ(d["state"], "Approved") << d.dump();
  ASSERT_TRUE(
      Fleet::WaitFor([&] { return fleet_->NodeState("a1") == "Ready"; }, absl::Seconds(20)));
  // The caller's retry through a follower runs, with A's approval.
  std::optional<httplib::Response> retried = Command(f, approved_cmd);
  ASSERT_TRUE(retried);
  EXPECT_EQ(retried->status, 200) << retried->body;
  EXPECT_EQ(retried->get_header_value("X-Moat-Approval-Id"), a);
  // Exactly once: the same command again is held anew (B), it does not run on A's approval.
  const std::string b = Hold(f, approved_cmd, &b_first, &waiters, {a});
  ASSERT_FALSE(b.empty());
  EXPECT_NE(b, a);
  // C: another command held; then the second leader is killed too.
  const std::string c = Hold(second, rejected_cmd, &c_first, &waiters, {a, b});
  ASSERT_FALSE(c.empty());
  const absl::Time b_held = absl::Now();
  const int third = KillTheLeader();
  ASSERT_GE(third, 0);
  for (size_t i = 1; i < waiters.size(); ++i) waiters[i].join();
  EXPECT_FALSE(b_first && b_first->status == 200) << "B ran on A's approval";
  EXPECT_FALSE(c_first && c_first->status == 200) << "C ran without an approval";

  // C rejected on the third leader through a follower: its retry answers 403 with the reason.
  const int g = AFollower();
  ASSERT_TRUE(Fleet::WaitFor([&] { return Pending(g).contains(c); }, absl::Seconds(10)));
  auto [rs, r] = Admin(g, "POST", "/v1/admin/approvals/" + c + "/reject",
                       R"({"reason": "downloads and runs a script"})");
  ASSERT_EQ(rs, 200) << r.dump();
  ASSERT_TRUE(
      Fleet::WaitFor([&] { return fleet_->NodeState("a1") == "Ready"; }, absl::Seconds(20)));
  std::optional<httplib::Response> refused = Command(g, rejected_cmd);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << refused->body;
  EXPECT_THAT(refused->body, HasSubstr("downloads and runs a script"));

  // B, undecided, is rejected at its deadline by the third leader (nobody waits on it there).
  EXPECT_TRUE(Fleet::WaitFor([&] { return !Pending(g).contains(b); },
                             kApprovalTimeout - (absl::Now() - b_held) + absl::Seconds(5)))
      << "the timeout did not fire after the failover";
  auto [as, audit] = Admin(g, "GET", "/v1/admin/audit?limit=100");
  ASSERT_EQ(as, 200);
  std::map<std::string, std::multiset<std::string>> states;  // id -> states in the trail
  for (const auto& rec : audit["items"]) states[rec.value("id", "")].insert(rec.value("state", ""));
  EXPECT_EQ(states[a].count("Approved"), 1u) << audit.dump();
  EXPECT_EQ(states[b].count("TimedOut"), 1u) << audit.dump();
  EXPECT_EQ(states[c].count("Rejected"), 1u) << audit.dump();
  EXPECT_TRUE(Pending(g).empty());
}

}  // namespace
}  // namespace moat::e2e
